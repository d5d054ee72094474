"""The gateway benchmark without a GPU: `python -m voxrt.loadgen.gateway_bench`.

A `voxrt serve --model standin` (voxrt/engine/standin.py: chunks of Qwen3-TTS's schedule, 2, 4, 8, 16, 25, ...
frames of 80 ms of float32 PCM at 24 kHz, finishing at a fixed multiple of real time) serves N concurrent
realtime sessions (Opus 48 kHz, 20 ms frames, pacing `realtime` with the default lead of 300 ms). Each session
speaks contexts back to back, each of `--frames` model frames (87: 6.96 s, LibriTTS test-clean's mean), and its
client reports playback every 100 ms, as the load generator does.

Per point the gateway's own figures over the measured window (after a ramp and a warm-up), from the stats
files every gateway process writes (`--stats-file`, voxrt/gateway/stats.py):
- send jitter: each frame's send time minus its due time. Due is when the pacing rule first allows the
  frame out (the instant the listener's buffer, by the session's playback clock, falls to lead_ms), or when
  its chunk reached the gateway process, whichever is later. 0 means the frame left the instant it could;
  what makes it late is the gateway itself: its event loop busy elsewhere, encoding, sending. The ceiling is
  judged on all frames; the table also splits them: "paced", the frames whose due time the pacing rule set
  (steady frames), and "ready", those whose due time their chunk's arrival set (a context's lead fill, up to
  lead_ms of audio released at once, and its share of the frames).
- CPU: the gateway processes' CPU seconds per second (cores), all their threads (the event loop, any
  `--encode-threads` workers, the engine client's reader thread), per session, and sessions per core; beside it
  the event loop's thread alone (loop us/frame).
- the gateway's event-loop lag, and the clients' (a client that lags is not measuring the gateway).
The ceiling is the highest session count whose send-jitter p99 stays within `--jitter-bound-ms` (5 ms).

The clients are plain `websockets` clients (cheaper per frame than voxrt.client) in `--client-procs`
processes, on uvloop where it is installed (`--client-loop`); the gateway runs `voxrt serve`'s default loop
unless `-- --loop asyncio|uvloop` says otherwise, and each row records which (`gateway_loop`, from its log). `--gateway-cpus` / `--client-cpus` pin each side to its own cores (Linux), so the gateway's
figures are per core and the clients do not steal its CPU; the stand-in engine process goes to
`--engine-cpus` (default: the clients' cores). `--nice -10` (as root) raises the gateway and the clients over
other work on a shared machine, their autogroups included (Linux schedules each session as a group, so a
process's nice value alone does not weigh against other sessions). `--opus-floor` times libopus alone on the
same signal first; the ceiling is then also given as a fraction of libopus alone's streams per core: at 48 kHz
(the signal resampled to the wire rate: issue 21's floor, `opus_floor`), and, where the gateway feeds libopus
the stand-in's 24 kHz samples (`voxrt serve --opus-rate auto`, the default; voxrt/audio/encoder.py), also
libopus alone fed the same way at the same bitrate (`opus_floor_as_fed`): the gateway's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from voxrt.gateway.event_loop import resolve_loop
from voxrt.loadgen.listener import Listener
from voxrt.timing import LoopLagMonitor, MsHistogram

FRAME_MS = 20
REPORT_EVERY_S = 0.1


# ---- the clients (one process runs many sessions) ---------------------------------------------------------------

async def _session(url: str, frames: int, stop_at: float, start_delay_s: float, totals: dict,
                   lead_ms: int | None = None) -> None:
    import websockets  # noqa: PLC0415

    await asyncio.sleep(start_delay_s)
    async with websockets.connect(url, max_size=None) as ws:  # offers permessage-deflate, as browsers do
        start = {"type": "session.start", "output": {"codec": "opus", "sample_rate": 48000, "frame_ms": FRAME_MS}}
        if lead_ms is not None:
            start["pacing"] = {"mode": "realtime", "lead_ms": lead_ms}
        await ws.send(json.dumps(start))
        json.loads(await ws.recv())
        turn = 0
        while time.monotonic() < stop_at:
            turn += 1
            cid = f"c{turn}"
            await ws.send(json.dumps({"type": "text", "context_id": cid, "text": "x" * 100, "num_frames": frames}))
            await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
            listener = Listener(time.monotonic())
            reporter = asyncio.create_task(_report(ws, cid, listener))
            try:
                while True:
                    message = await ws.recv()
                    if isinstance(message, bytes):
                        now = time.monotonic()
                        is_last = bool(message[1] & 2)
                        listener.on_audio(now, FRAME_MS / 1000, is_last)
                        totals["frames"] += 1
                    elif message.startswith('{"type":"context.done'):
                        break
            finally:
                reporter.cancel()
            totals["contexts"] += 1
            totals["stalls"] += listener.num_stalls
            totals["stall_ms"] += listener.stall_ms
            if listener.ttfa_ms is not None:
                totals["ttfa"].observe(listener.ttfa_ms)
        await ws.send(json.dumps({"type": "session.end"}))


async def _report(ws, cid: str, listener: Listener) -> None:
    try:
        while not listener.is_finished:
            await asyncio.sleep(REPORT_EVERY_S)
            if listener.first_audio_s is not None and not listener.is_finished:
                played_ms = listener.played_s(time.monotonic()) * 1000
                await ws.send(json.dumps({"type": "playback", "context_id": cid, "played_ms": round(played_ms, 1)}))
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 (the session closed)
        return


async def _clients(url: str, num_sessions: int, frames: int, ramp_s: float, run_s: float, window: tuple[float, float],
                   seed: int, lead_ms: int | None = None) -> dict:
    totals = {"frames": 0, "contexts": 0, "stalls": 0, "stall_ms": 0.0, "ttfa": MsHistogram(), "errors": 0}
    monitor = LoopLagMonitor()
    monitor.start()
    rng = random.Random(seed)
    stop_at = time.monotonic() + run_s
    tasks = [asyncio.create_task(_session(url, frames, stop_at, rng.uniform(0, ramp_s), totals, lead_ms))
             for _ in range(num_sessions)]
    start_s = time.monotonic()
    await asyncio.sleep(max(0.0, start_s + window[0] - time.monotonic()))
    monitor.window()
    mark = dict(totals, ttfa=None)
    await asyncio.sleep(max(0.0, start_s + window[1] - time.monotonic()))
    measured = monitor.window()
    in_window = {k: totals[k] - mark[k] for k in ("frames", "contexts", "stalls", "stall_ms")}
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await monitor.stop()
    errors = [r for r in results if isinstance(r, BaseException)]
    return {**in_window, "errors": len(errors), "first_error": repr(errors[0])[:200] if errors else None,
            "ttfa": totals["ttfa"].summary(), "loop_lag": measured["loop_lag"], "cpu_cores": measured["cpu_cores"]}


def _set_nice(nice: int) -> None:
    """The niceness of this process and of its autogroup: with Linux's autogroup scheduling (each session its
    own group) a process's own nice value only weighs it against its session, not against other sessions'
    work on a shared machine."""
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass  # no autogroups here (or not permitted): the process's nice value is all there is


def _client_main(args: tuple, out) -> None:
    from voxrt.gateway.event_loop import run  # noqa: PLC0415

    cpus, nice, loop = args[-1]
    if cpus:
        os.sched_setaffinity(0, cpus)
    if nice:
        _set_nice(nice)
    out.put(run(_clients(*args[:-1]), loop))


# ---- the gateway ------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(port: int, stats_prefix: str, cpus: list[int] | None, extra: list[str], speed: float,
                  nice: int = 0) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "voxrt.cli", "serve", "--model", "standin", "--standin-speed", str(speed),
           "--port", str(port), "--allow-pinned-lengths", "--max-sessions", "100000", "--stats-file", stats_prefix,
           *extra]
    def preexec() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if nice:
            _set_nice(nice)
    log_path = f"{stats_prefix}.serve.log"
    with open(log_path, "w") as log:  # a file, not a pipe nobody reads: a full pipe would block the gateway
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, preexec_fn=preexec, start_new_session=True)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the gateway exited: {Path(log_path).read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                return proc
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the gateway did not become ready within 60 s")
    except BaseException:  # not ready, or this run stopped meanwhile: the gateway goes too
        stop_gateway(proc)
        raise


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for path in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                kids = [int(x) for x in Path(path).read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def pin_engine(proc: subprocess.Popen, gateway_pids: set[int], cpus: list[int] | None) -> list[int]:
    """Moves the serve process's other descendants (the engine process; it inherited the gateway's pinning) to
    `cpus`, so that the stand-in engine does not share the gateway's cores. Returns the pids moved."""
    if not cpus:
        return []
    moved = []
    for pid in _descendants(proc.pid):
        if pid not in gateway_pids:
            try:
                os.sched_setaffinity(pid, cpus)
                moved.append(pid)
            except OSError:
                pass
    return moved


def stop_gateway(proc: subprocess.Popen) -> None:
    """SIGTERM to the serve process alone: it stops its engine itself (a signal to the whole group would
    interrupt the engine mid-step, and SIGINT leaves uvicorn's KeyboardInterrupt traceback in the log); the
    group is killed only if it does not exit."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def read_stats(prefix: str) -> dict[int, dict]:
    out = {}
    for path in glob.glob(f"{prefix}.*.json"):
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue  # being replaced right now; the next read gets it
        out[data["pid"]] = data
    return out


def us_per_frame(row: dict, key: str = "cpu_cores") -> float | None:
    """The gateway's CPU per frame sent, in microseconds (to set beside libopus alone's): all its threads
    (`cpu_cores`, what the ceiling's sessions per core use), or its event loop's thread alone
    (`loop_cpu_cores`; the rest is --encode-threads workers and the engine client's reader thread)."""
    return 1e6 * row[key] / row["frames_per_s"] if row.get(key) and row.get("frames_per_s") else None


def window_figures(before: dict[int, dict], after: dict[int, dict]) -> dict:
    """Lateness, loop lag, garbage collections and CPU of every gateway process between two reads of the stats
    files."""
    lateness, lag, collections = MsHistogram(), MsHistogram(), MsHistogram()
    by_generation, collected = [MsHistogram() for _ in range(3)], [0, 0, 0]
    split = {"send_lateness_paced": MsHistogram(), "send_lateness_ready": MsHistogram()}
    cpu_s = wall_s = 0.0
    loop_cpu_s: float | None = 0.0  # None when a process writes none (gateways before round 6)
    frames = wakeups = writes = 0
    for pid, end in after.items():
        start = before.get(pid)
        if start is None:
            continue
        lateness.merge(MsHistogram.from_dict(end["send_lateness"]).minus(MsHistogram.from_dict(start["send_lateness"])))
        for key, hist in split.items():  # gateways before 2026-12-02 write no split
            if key in end and key in start:
                hist.merge(MsHistogram.from_dict(end[key]).minus(MsHistogram.from_dict(start[key])))
        lag.merge(MsHistogram.from_dict(end["loop_lag"]).minus(MsHistogram.from_dict(start["loop_lag"])))
        if end.get("gc") and start.get("gc"):  # gateways before 2026-12-05 write none
            collections.merge(MsHistogram.from_dict(end["gc"]).minus(MsHistogram.from_dict(start["gc"])))
        if end.get("gc_generations") and start.get("gc_generations"):  # per generation: gateways after 5081f17
            for generation, (a, b) in enumerate(zip(start["gc_generations"], end["gc_generations"])):
                by_generation[generation].merge(MsHistogram.from_dict(b).minus(MsHistogram.from_dict(a)))
                collected[generation] += end["gc_collected"][generation] - start["gc_collected"][generation]
        cpu_s += end["cpu_s"] - start["cpu_s"]
        if loop_cpu_s is not None and "loop_cpu_s" in end and "loop_cpu_s" in start:
            loop_cpu_s += end["loop_cpu_s"] - start["loop_cpu_s"]
        else:
            loop_cpu_s = None
        wall_s = max(wall_s, end["monotonic_s"] - start["monotonic_s"])
        frames += end["frames_sent"] - start["frames_sent"]
        wakeups += end.get("pacer_wakeups", 0) - start.get("pacer_wakeups", 0)
        writes += end.get("frame_writes", 0) - start.get("frame_writes", 0)  # gateways before round 12: 0
    return {"jitter": lateness.summary(), "jitter_paced": split["send_lateness_paced"].summary(),
            "jitter_ready": split["send_lateness_ready"].summary(), "loop_lag": lag.summary(),
            "gc": collections.summary() if collections.count else None,
            # per generation (0 young .. 2 full): its pauses, and the unreachable objects (cycles) it freed
            "gc_generations": [{**h.summary(), "collected": n} if h.count else None
                               for h, n in zip(by_generation, collected)],
            "cpu_cores": cpu_s / wall_s if wall_s else None,
            "loop_cpu_cores": loop_cpu_s / wall_s if wall_s and loop_cpu_s is not None else None,
            "frames_per_s": frames / wall_s if wall_s else None,
            "pacer_wakeups_per_s": wakeups / wall_s if wall_s else None,
            "frame_writes_per_frame": writes / frames if frames else None, "processes": len(after)}


def run_point(num_sessions: int, args) -> dict:
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="voxrt-gwbench-")
    prefix = os.path.join(workdir, "stats")
    gateway = start_gateway(port, prefix, args.gateway_cpus, args.serve_args, args.speed, args.nice)
    try:
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        run_s = args.ramp + args.warmup + args.duration + 1.0
        window = (args.ramp + args.warmup, args.ramp + args.warmup + args.duration)
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = []
        per = [num_sessions // args.client_procs + (i < num_sessions % args.client_procs)
               for i in range(args.client_procs)]
        for i, n in enumerate(per):
            p = ctx.Process(target=_client_main, args=((url, n, args.frames, args.ramp, run_s, window, args.seed + i,
                                                        args.lead_ms, (args.client_cpus, args.nice, args.client_loop)),
                                                  queue),
                            daemon=True)
            p.start()
            procs.append(p)
        t0 = time.monotonic()
        time.sleep(1.0)
        gateway_pids = set(read_stats(prefix)) or {gateway.pid}
        pin_engine(gateway, gateway_pids, args.engine_cpus)
        time.sleep(max(0.0, t0 + window[0] - time.monotonic()))
        before = read_stats(prefix)
        time.sleep(max(0.0, t0 + window[1] - time.monotonic()))
        after = read_stats(prefix)
        clients = [queue.get(timeout=run_s + 120) for _ in procs]
        for p in procs:
            p.join(10)
    finally:
        stop_gateway(gateway)
    log_lines = Path(f"{prefix}.serve.log").read_text().splitlines()
    problems = [line for line in log_lines if "ERROR" in line or "WARNING" in line or "Traceback" in line]
    loop_line = next((line[line.index("event loop: ") + 12:] for line in log_lines if "event loop: " in line), None)
    if problems:
        print(f"[gateway-bench] {len(problems)} warnings/errors in the gateway log, e.g. {problems[:3]}",
              file=sys.stderr)
    figures = window_figures(before, after)
    cpu = figures["cpu_cores"] or 0.0
    client_frames = sum(c["frames"] for c in clients)
    return {
        "sessions": num_sessions, "gateway_loop": loop_line, **figures,
        "cpu_per_session_pct": 100 * cpu / num_sessions if num_sessions else None,
        "sessions_per_core": num_sessions / cpu if cpu else None,
        "client_frames_per_s": client_frames / args.duration,
        "client_stalls": sum(c["stalls"] for c in clients),
        "client_contexts": sum(c["contexts"] for c in clients),
        "client_errors": sum(c["errors"] for c in clients),
        "client_first_error": next((c["first_error"] for c in clients if c["first_error"]), None),
        "client_loop_lag_p99_ms": max((c["loop_lag"]["p99_ms"] or 0) for c in clients),
        "client_cpu_cores": sum(c["cpu_cores"] for c in clients),
    }


def _serve_arg(serve_args: list[str], name: str, default: str) -> str:
    """A `voxrt serve` flag's value among the arguments after --, as `--name=value` or `--name value`."""
    for i, arg in enumerate(serve_args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(serve_args):
            return serve_args[i + 1]
    return default


def _floor(floor_us: float, **fields) -> dict:
    return {**fields, "us_per_frame": round(floor_us, 1), "sessions_per_core": round(1e6 / floor_us / (1000 / FRAME_MS))}


def format_table(rows: list[dict], bound_ms: float) -> str:
    lines = ["sessions  jitter p50  p99 ms  max ms  paced p99  ready p99 (share)  gw loop lag p99  gw CPU cores  "
             "CPU/session %  sessions/core  frames/s  us/frame  loop us/frame  writes/frame  client stalls  "
             "client lag p99"]
    for r in rows:
        j = r["jitter"]
        ok = "ok" if (j["p99_ms"] is not None and j["p99_ms"] <= bound_ms) else "OVER"
        paced, ready = r.get("jitter_paced") or {}, r.get("jitter_ready") or {}
        share = 100 * (ready.get("count") or 0) / j["count"] if j.get("count") else 0
        lines.append(f"{r['sessions']:8d}  {j['p50_ms'] or 0:10.2f}  {j['p99_ms'] or 0:6.2f}  {j['max_ms']:6.1f}  "
                     f"{paced.get('p99_ms') or 0:9.2f}  {ready.get('p99_ms') or 0:9.2f} ({share:4.1f}%)  "
                     f"{r['loop_lag']['p99_ms'] or 0:15.2f}  {r['cpu_cores'] or 0:12.2f}  "
                     f"{r['cpu_per_session_pct'] or 0:13.3f}  {r['sessions_per_core'] or 0:13.0f}  "
                     f"{r['frames_per_s'] or 0:8.0f}  {us_per_frame(r) or 0:8.0f}  {us_per_frame(r, 'loop_cpu_cores') or 0:13.0f}  "
                     f"{r.get('frame_writes_per_frame') or 0:12.3f}  {r['client_stalls']:13d}  {r['client_loop_lag_p99_ms']:14.1f}  {ok}")
    return "\n".join(lines)


def ceiling(rows: list[dict], bound_ms: float, key: str = "jitter") -> dict | None:
    """The highest session count at which every point up to it kept send-jitter p99 within the bound (`key`
    "jitter_paced": the paced frames' alone, a figure beside the ceiling, not the ceiling)."""
    best = None
    for r in sorted(rows, key=lambda r: r["sessions"]):
        p99 = (r.get(key) or {}).get("p99_ms")
        if p99 is None or p99 > bound_ms or r["client_errors"]:
            break
        best = r
    return best


def _cpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m voxrt.loadgen.gateway_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", default="50,100,150,200", help="comma-separated session counts (one point each)")
    p.add_argument("--duration", type=float, default=20.0, help="measured window per point, seconds")
    p.add_argument("--ramp", type=float, default=3.0, help="sessions start spread over this many seconds")
    p.add_argument("--warmup", type=float, default=4.0, help="seconds after the ramp before the window opens")
    p.add_argument("--frames", type=int, default=87, help="model frames (80 ms) per context")
    p.add_argument("--speed", type=float, default=2.0, help="the stand-in engine's multiple of real time")
    p.add_argument("--client-procs", type=int, default=1)
    p.add_argument("--gateway-cpus", default=None, help="pin the gateway, e.g. 0 or 0-3 (Linux)")
    p.add_argument("--client-cpus", default=None, help="pin the clients, e.g. 1")
    p.add_argument("--engine-cpus", default=None, help="pin the stand-in engine process (default: the client "
                   "cores, so it does not share the gateway's)")
    p.add_argument("--jitter-bound-ms", type=float, default=5.0)
    p.add_argument("--lead-ms", type=int, default=None, help="the sessions' pacing lead_ms (default: the server's, "
                   "300): how much audio a context's first chunk releases at once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nice", type=int, default=0, help="niceness increment for the gateway and the clients "
                   "(negative, as root, keeps other work on a shared machine from preempting them)")
    p.add_argument("--client-loop", default="auto", choices=["auto", "uvloop", "asyncio"], help="the client "
                   "processes' event loop (auto: uvloop when installed); the gateway's is `-- --loop ...`")
    p.add_argument("--opus-floor", action="store_true", help="first time libopus alone on the stand-in's "
                   "signal and print the sessions-per-core floor")
    p.add_argument("--out", default=None, help="write the rows and the ceiling as JSON here")
    p.add_argument("serve_args", nargs="*", help="after --: more `voxrt serve` flags (e.g. --workers 2)")
    args = p.parse_args(argv)
    args.gateway_cpus, args.client_cpus = _cpus(args.gateway_cpus), _cpus(args.client_cpus)
    args.engine_cpus = _cpus(args.engine_cpus) or args.client_cpus
    try:
        counts = [int(x) for x in args.sessions.split(",") if x.strip()]
    except ValueError:
        p.error(f"--sessions: expected comma-separated integers, got {args.sessions!r}")
    if not counts or min(counts) < 1 or args.duration <= 0 or args.client_procs < 1 or args.frames < 1:
        p.error("--sessions counts, --duration, --client-procs and --frames must be positive")
    floor = floor_as_fed = None
    if args.opus_floor:
        from voxrt.audio.encoder import opus_codec_rate  # noqa: PLC0415
        from voxrt.audio.opus import default_bitrate  # noqa: PLC0415
        from voxrt.engine.standin import SAMPLE_RATE, opus_floor_us  # noqa: PLC0415

        signal_hint = _serve_arg(args.serve_args, "--opus-signal", "auto")
        floor = _floor(opus_floor_us(signal=signal_hint), opus_signal=signal_hint, rate=48000)
        print(f"libopus alone on the stand-in's signal at 48 kHz (--opus-signal {signal_hint}): {floor['us_per_frame']} "
              f"us per 20 ms frame, {floor['sessions_per_core']} streams per core; "
              f"70%: {0.7 * floor['sessions_per_core']:.0f}", flush=True)
        codec_rate = opus_codec_rate(SAMPLE_RATE, 48000, _serve_arg(args.serve_args, "--opus-rate", "auto"))
        if codec_rate != 48000:  # the gateway feeds libopus the stand-in's own samples: that floor too
            bitrate = default_bitrate(48000, FRAME_MS)
            floor_as_fed = _floor(opus_floor_us(signal=signal_hint, rate=codec_rate, bitrate=bitrate),
                                  opus_signal=signal_hint, rate=codec_rate, bitrate=bitrate)
            print(f"libopus alone as the gateway feeds it ({codec_rate} Hz input, {bitrate} b/s): "
                  f"{floor_as_fed['us_per_frame']} us per frame, {floor_as_fed['sessions_per_core']} streams per "
                  f"core; 70%: {0.7 * floor_as_fed['sessions_per_core']:.0f}", flush=True)
    # `timeout` and the like stop this with SIGTERM: exit through the finally blocks, which stop the gateway
    # (it runs in its own session, so the signal does not reach it)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    for n in counts:
        row = run_point(n, args)
        if not rows:
            print(f"gateway's {row['gateway_loop'] and 'event loop: ' + row['gateway_loop'] or 'event loop: not logged'}; the clients': "
                  f"{resolve_loop(args.client_loop)}", flush=True)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        print(format_table([row], args.jitter_bound_ms).splitlines()[-1], flush=True)
        if args.out:  # after every point, so a run stopped part-way keeps what it measured
            Path(args.out).write_text(json.dumps({"args": vars(args), "opus_floor": floor,
                                                  "opus_floor_as_fed": floor_as_fed, "rows": rows,
                                                  "ceiling": ceiling(rows, args.jitter_bound_ms),
                                                  "ceiling_paced_frames": ceiling(rows, args.jitter_bound_ms,
                                                                                  "jitter_paced")},
                                                 indent=2) + "\n")
    best = ceiling(rows, args.jitter_bound_ms)
    print(format_table(rows, args.jitter_bound_ms))
    if best is None:
        print(f"ceiling: none of the points kept send-jitter p99 <= {args.jitter_bound_ms:g} ms")
    else:
        of_floor = ""
        if floor is not None:
            of_floor = (f"; {100 * best['sessions_per_core'] / floor['sessions_per_core']:.0f}% of libopus alone's "
                        f"{floor['sessions_per_core']} streams per core at 48 kHz")
            if floor_as_fed is not None:
                of_floor += (f", {100 * best['sessions_per_core'] / floor_as_fed['sessions_per_core']:.0f}% of its "
                             f"{floor_as_fed['sessions_per_core']} fed as the gateway feeds it")
        print(f"ceiling: {best['sessions']} sessions with send-jitter p99 {best['jitter']['p99_ms']:.2f} ms "
              f"<= {args.jitter_bound_ms:g} ms, {best['cpu_cores']:.2f} gateway cores: "
              f"{best['sessions_per_core']:.0f} sessions per core{of_floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
