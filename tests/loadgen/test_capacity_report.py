"""bench/capacity_report.py (issue 15's report over the calls of bench/gpu_capacity.sh), on hand-made call folders:
the capacities read on the grid, the acceptance checks, the knee's trace line, and a run whose calls came on
different GPUs said so. A wrong report costs a GPU run to find out."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("capacity_report", ROOT / "bench" / "capacity_report.py")
capacity_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capacity_report)

H200 = "NVIDIA H200, 580.159.04"


def _point(rate, attainment, p50=60.0, p99=120.0):
    return {"rate": rate, "attainment": attainment, "ttfa_p50_ms": p50, "ttfa_p99_ms": p99,
            "goodput_rps": rate * attainment}


def _archive(job_dir: Path, name: str, files: dict[str, str]) -> None:
    """job_dir/name, a tgz holding `files` (path inside -> text), as the GPU scripts pack their runs."""
    job_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(job_dir / name, "w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _config(call: Path, job: str, run: str, points, gpu=H200, archive="deadline.tgz") -> None:
    _archive(call / job, archive, {f"runs/{run}/summary.json": json.dumps({"points": points}),
                                   "runs/gpu.txt": f"{gpu}\ntorch 2.11.0\n"})


def test_report_reads_capacities_ratios_and_the_knee(tmp_path, capsys):
    call1, call2 = tmp_path / "call1", tmp_path / "call2"
    _config(call1, "libritts-a", "base-sync", [_point(56, 1.0), _point(64, 0.993), _point(72, 0.514)])
    _config(call1, "libritts-c", "deadline-lanes", [_point(104, 1.0), _point(112, 0.953), _point(120, 0.275)])
    (call1 / "jobs.txt").write_text("[   0 s] tree abc123def456; jobs: libritts:a libritts:c; budget 570 s\n")
    _config(call2, "libritts-ws", "ws-tokens", [_point(96, 1.0), _point(104, 0.907), _point(112, 0.86)],
            archive="product_path.tgz")
    trace = {"/x/trace-112/engine.jsonl": {"lm": {"busy_pct": 99.1, "prefill_share_pct": 6.2, "decode_batch_p50": 101},
                                           "codec": {"background": {"busy_pct": 41.0}, "urgent": {"busy_pct": 30.5}}}}
    _archive(call2 / "libritts-trace", "knee.tgz", {"r/trace-112.json": json.dumps(trace), "r/gpu.txt": H200})
    (call2 / "jobs.txt").write_text("[   0 s] tree abc123def456; jobs: libritts:ws libritts:trace; budget 570 s\n")
    out = tmp_path / "report"
    assert capacity_report.main([str(call1), str(call2), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert text == capsys.readouterr().out
    assert "Not one run" not in text and "different trees" not in text
    assert "| (a) base, time-shared loop | 64 | 64 | 60 / 120 |" in text
    assert "| (c) deadline, lanes + urgent lane | 112 | 104 | 60 / 120 |" in text
    assert "| (c) over the WebSocket, tokens at 30/s | 104 | 96 | 60 / 120 |" in text
    assert "| LibriTTS test-clean: (c)/(a) at 90% >= 2 | 112 / 64 = 1.75 | **no** |" in text
    assert "| LibriTTS test-clean: WebSocket tokens within 10% of engine-direct at 90% | 104 vs 112 req/s (93%) | yes |" in text
    assert "| (c) engine-direct, LibriTTS, 90% >= v2's 48 req/s | 112 req/s | yes |" in text
    assert "| (c) engine-direct, LibriTTS, 99% >= the goal's 72 req/s | 104 req/s | yes |" in text
    assert ("The knee traced at 112 req/s (20 s, (c) engine-direct): LM lane busy 99.1%, prefill share 6.2%, "
            "decode batch p50 101; codec lanes busy: background 41.0%, urgent 30.5%.") in text
    for name in ("compare.md", "compare_attainment.png", "compare_p99_ttfa.png", "compare_goodput.png"):
        assert (out / "libritts" / name).is_file()
    assert not (out / "seedtts").exists()  # no Seed-TTS job ran


def test_the_knee_line_takes_the_busy_shares_while_requests_arrived(tmp_path):
    call = tmp_path / "c"
    trace = {"/x/trace-112/engine.jsonl": {"lm": {"busy_pct": 89.0, "busy_pct_while_arriving": 99.9,
                                                  "prefill_share_pct": 6.8, "decode_batch_p50": 91},
                                           "codec": {"background": {"busy_pct": 76.4, "busy_pct_while_arriving": 74.7},
                                                     "urgent": {"busy_pct": 27.9, "busy_pct_while_arriving": 33.8}}}}
    _archive(call / "libritts-trace", "knee.tgz", {"r/trace-112.json": json.dumps(trace), "r/gpu.txt": H200})
    _config(call, "libritts-c", "deadline-lanes", [_point(104, 1.0), _point(112, 1.0), _point(116, 0.777)])
    jobs, calls = capacity_report.load_calls([call], tmp_path / "u")
    text = capacity_report.report(jobs, calls, tmp_path / "r")
    assert ("LM lane busy 99.9% while requests arrived, prefill share 6.8%, decode batch p50 91; codec lanes busy "
            "while requests arrived: background 74.7%, urgent 33.8%.") in text


def test_a_grid_that_never_missed_is_a_lower_bound_and_mixed_gpus_are_named(tmp_path, capsys):
    call1, call2 = tmp_path / "c1", tmp_path / "c2"
    _config(call1, "seedtts-a", "base-sync", [_point(88, 1.0), _point(104, 0.8)])
    _config(call2, "seedtts-c", "deadline-lanes", [_point(168, 1.0), _point(184, 0.999)], gpu="NVIDIA H100 80GB HBM3, 580")
    (call1 / "jobs.txt").write_text("tree aaa; jobs: seedtts:a\n")
    (call2 / "jobs.txt").write_text("tree bbb; jobs: seedtts:c\n")
    assert capacity_report.main([str(call1), str(call2), "--out", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert "**Not one run: the jobs ran on different GPUs (NVIDIA H100 80GB HBM3, 580; NVIDIA H200, 580.159.04).**" in text
    assert "**The calls ran different trees (aaa, bbb).**" in text
    assert "| (c) deadline, lanes + urgent lane [NVIDIA H100 80GB HBM3, 580] | >= 184 | >= 184 |" in text
    assert "| Seed-TTS eval (English): (c)/(a) at 90% >= 2 | 184 (the grid ended: >=) / 88 = 2.09 | yes |" in text


def test_a_first_point_that_missed_reads_below_the_grid(tmp_path):
    call = tmp_path / "c"
    _config(call, "libritts-c", "deadline-lanes", [_point(104, 0.85), _point(112, 0.5)])
    jobs, calls = capacity_report.load_calls([call], tmp_path / "u")
    text = capacity_report.report(jobs, calls, tmp_path / "r")
    assert "| (c) deadline, lanes + urgent lane | < 104 | < 104 | - |" in text
    assert calls[0]["tree"] == "unknown"


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    assert capacity_report.main([str(tmp_path / "missing"), "--out", str(tmp_path / "r")]) == 2
    assert "not a directory" in capsys.readouterr().err
    call = tmp_path / "c"
    (call / "libritts-a").mkdir(parents=True)
    (call / "libritts-a" / "deadline.tgz").write_bytes(b"not a tar")
    assert capacity_report.main([str(call), "--out", str(tmp_path / "r")]) == 2
    assert "error:" in capsys.readouterr().err


def _requests(call: Path, job: str, run: str, points, rows: dict[float, list[str]], archive="deadline.tgz") -> None:
    """A config job whose archive also holds runs/<run>/requests.jsonl: `rows` per rate (each row's id)."""
    lines = "".join(json.dumps({"id": i, "rate": rate}) + "\n" for rate, ids in rows.items() for i in ids)
    _archive(call / job, archive, {f"runs/{run}/summary.json": json.dumps({"points": points, "complete": True}),
                                   f"runs/{run}/requests.jsonl": lines, "runs/gpu.txt": f"{H200}\ntorch 2.11.0\n"})


def test_a_sweep_over_several_calls_is_read_as_one(tmp_path, capsys):
    """A config's sweep cut by one call's time and continued in others: its points merged by rate (the later
    call's point at a rate both ran), its capacity read on the merged grid, its requests the merged points'."""
    calls = [tmp_path / f"call{i}" for i in (1, 2, 3)]
    _requests(calls[0], "libritts-b", "base-lanes", [_point(72, 1.0), _point(80, 1.0), _point(88, 0.5)],
              {72: ["a72"], 80: ["a80"], 88: ["a88"]})
    _requests(calls[1], "libritts-b", "base-lanes", [_point(80, 1.0), _point(88, 1.0), _point(96, 0.998)],
              {80: ["b80"], 88: ["b88"], 96: ["b96"]})
    _requests(calls[2], "libritts-b", "base-lanes", [_point(104, 0.766)], {104: ["c104"]})
    _config(calls[2], "libritts-c", "deadline-lanes", [_point(96, 1.0), _point(104, 0.95)])
    for call in calls:
        (call / "jobs.txt").write_text("[   0 s] tree abc; jobs: libritts:b\n")
    out = tmp_path / "r"
    assert capacity_report.main([*map(str, calls), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| (b) base, lanes | 96 | 96 | 60 / 120 |" in text  # 88 from call 2 (1.0), not call 1 (0.5)
    assert f"(b) base, lanes: one sweep from 3 calls ({calls[0]}, {calls[1]}, {calls[2]}), its points merged" in text
    assert "(c) deadline, lanes + urgent lane: one sweep" not in text
    assert "different trees" not in text and "Not one run" not in text
    merged = out / "unpacked" / "merged" / "libritts-b" / "runs" / "base-lanes"
    summary = json.loads((merged / "summary.json").read_text())
    assert [(p["rate"], p["attainment"]) for p in summary["points"]] == [(72, 1.0), (80, 1.0), (88, 1.0),
                                                                        (96, 0.998), (104, 0.766)]
    ids = [json.loads(line)["id"] for line in (merged / "requests.jsonl").read_text().splitlines()]
    assert ids == ["a72", "b80", "b88", "b96", "c104"]
    compare_md = (out / "libritts" / "compare.md").read_text()
    assert "| (b) base, lanes | 96 req/s | 96 req/s |" in compare_md


def test_tree_hash_matches_the_gpu_script(tmp_path):
    """The dev machine's hash of a checkout equals what bench/gpu_capacity.sh records on the GPU host for it."""
    import shutil
    import subprocess

    for rel in ("voxrt/a.py", "voxrt/sub/b.sh", "bench/c.py", "bench/results/skip.py", "voxrt/notes.txt",
                "models/m/d.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "voxrt" / "models").symlink_to("../models")  # as the repository links the model programs
    script = (ROOT / "bench" / "gpu_capacity.sh").read_text()
    body = script[script.index("tree_hash() {"):script.index('note "tree $(tree_hash)')]
    if shutil.which("sha1sum") is None:
        raise AssertionError("sha1sum (coreutils) is needed")
    shell = subprocess.run(["bash", "-c", body + "tree_hash"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shell.stdout.strip() == capacity_report.tree_hash(tmp_path)
    (tmp_path / "bench/results/skip.py").write_text("changed")  # results do not count
    assert capacity_report.tree_hash(tmp_path) == shell.stdout.strip()
    (tmp_path / "models/m/d.py").write_text("changed")  # the model programs count, through the link
    assert capacity_report.tree_hash(tmp_path) != shell.stdout.strip()
    shell = subprocess.run(["bash", "-c", body + "tree_hash"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shell.stdout.strip() == capacity_report.tree_hash(tmp_path)
    (tmp_path / "voxrt/a.py").write_text("changed")
    assert capacity_report.tree_hash(tmp_path) != shell.stdout.strip()


def test_the_trace_job_takes_the_knee_the_c_job_found(tmp_path):
    """bench/gpu_capacity.sh's trace job runs at KNEE_<dataset> when given, else at the 90% capacity the (c) job
    of the same call found (its gzipped log in $OUT), else at the script's default knee."""
    import gzip
    import subprocess

    script = (ROOT / "bench" / "gpu_capacity.sh").read_text()
    body = script[script.index("knee_of() {"):script.index('note "tree $(tree_hash)')]

    def knee(env: dict) -> str:
        given = env.get("given", "")  # as the script sets them: KNEE_<dataset> is the given value or the default
        prelude = f"OUT={tmp_path}; KNEE_libritts={given or 112}; GIVEN_KNEE_libritts={given}\n"
        done = subprocess.run(["bash", "-c", prelude + body + "knee_of libritts"], capture_output=True, text=True,
                              check=True)
        return done.stdout.strip()

    assert knee({}) == "112"  # no (c) job in this call: the default
    log = tmp_path / "libritts-c.log.gz"
    log.write_bytes(gzip.compress(b"== deadline-lanes (rc 0)\n     120   3709   3709    100.0\n"
                                  b"capacity at 90% attainment: none found\n"))
    assert knee({}) == "112"  # (c) found none: the default
    log.write_bytes(gzip.compress(b"== deadline-lanes (rc 0)\ncapacity at 90% attainment: 128 req/s\n"
                                  b"capacity at 99% attainment: 120 req/s\n"))
    assert knee({}) == "128"
    assert knee({"given": "104"}) == "104"  # given: that rate, not (c)'s


def test_the_calls_and_grids_of_the_gpu_script():
    """bench/gpu_capacity.sh's CALL=N runs the header's call N (its (c) and (a) jobs in one call), its grids follow
    the GPU kind (an H200's (a) grid starts higher than an H100's), a grid given stays, and a CALL outside 1-6 is
    refused with a message."""
    import subprocess

    script = (ROOT / "bench" / "gpu_capacity.sh").read_text()
    body = script[script.index("CALL=${CALL:-}"):script.index("SECONDS=0")]

    def run(**env: str) -> subprocess.CompletedProcess:
        prelude = "MODEL=qwen3-tts\n" + "".join(f"{k}={v}\n" for k, v in env.items())
        show = 'echo "$JOBS|$GRID_libritts_a|$GRID_libritts_c|$KNEE_libritts"'
        return subprocess.run(["bash", "-c", prelude + body + show], capture_output=True, text=True)

    assert run(CALL="1", KIND="h200").stdout.strip() == "libritts:c libritts:a|88,96,104|144,152,160,168|152"
    assert run(CALL="4", KIND="h100").stdout.strip() == "seedtts:c seedtts:a|80,88,96,104|144,152,160,168|160"
    assert run(CALL="2", KIND="h200", GRID_libritts_a="96").stdout.strip().split("|")[:2] == [
        "libritts:trace libritts:b", "96"]
    assert run(KIND="h100", JOBS="libritts:ws").stdout.strip().startswith("libritts:ws|")
    assert run(CALL="1", KIND="h200", JOBS="libritts:b").stdout.startswith("libritts:b|")  # JOBS wins over CALL
    refused = run(CALL="7", KIND="h200")
    assert refused.returncode == 2 and "CALL is 1-6" in refused.stderr
    tiny = run(CALL="1", KIND="tiny").stdout.strip().split("|")
    assert tiny[1:3] == ["1,2", "1,2"]


def test_the_calls_table_names_each_calls_host_and_says_when_they_differ(tmp_path):
    """gpu.txt's `host:` line (bench/host_probe.sh) goes into the calls table without its command; calls on two
    hosts are said so; a call from before the probe reads '-'."""
    calls = [tmp_path / n for n in ("c1", "c2", "c3")]
    host = "host: {name}, Intel Xeon, 16 cores, plan_step {ms} ms (bench/host_plan.py --crowd --batch 256)\n"
    for call, name, ms in ((calls[0], "gpu-a", "1.21"), (calls[1], "gpu-b", "1.83")):
        _archive(call / "libritts-c", "deadline.tgz", {
            "runs/deadline-lanes/summary.json": json.dumps({"points": [_point(144, 1.0), _point(152, 0.95)]}),
            "runs/gpu.txt": f"{H200}\ntorch 2.11.0\n" + host.format(name=name, ms=ms)})
        (call / "jobs.txt").write_text("tree abc; jobs: libritts:c\n")
    _config(calls[2], "libritts-a", "base-sync", [_point(88, 1.0), _point(96, 0.9)])
    (calls[2] / "jobs.txt").write_text("tree abc; jobs: libritts:a\n")
    jobs, table = capacity_report.load_calls(calls, tmp_path / "u")
    text = capacity_report.report(jobs, table, tmp_path / "r")
    assert f"| {calls[0]} | abc | {H200} | gpu-a, Intel Xeon, 16 cores, plan_step 1.21 ms | libritts-c |" in text
    assert f"| {calls[2]} | abc | {H200} | - | libritts-a |" in text
    assert "The calls ran on 2 hosts (gpu-a, gpu-b)" in text
    one = capacity_report.report(*capacity_report.load_calls(calls[:1] + calls[2:], tmp_path / "v"), tmp_path / "s")
    assert "The calls ran on" not in one


def test_the_host_probe_writes_one_line_and_never_stops_a_script(tmp_path):
    """bench/host_probe.sh (sourced by the GPU scripts, some under `set -e`): one `host:` line with the planner's ms a
    step when bench/host_plan.py runs, "?" in its place when it fails; the script goes on either way, and the
    report reads the line back."""
    import subprocess

    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("ok", 'echo "rate   200: 852 steps, live p50 598, plan_step 1.234 ms/step (admit 0.1)"'),
                       ("fails", "exit 3")):
        (fake / name).mkdir()
        (fake / name / "python").write_text(f"#!/bin/sh\n{body}\n")
        (fake / name / "python").chmod(0o755)
    lines = []
    for name in ("ok", "fails"):
        out = tmp_path / f"{name}.txt"
        saved = tmp_path / f"{name}-probe.txt"  # the machine's copy (/tmp/voxrt-host-probe.txt on a GPU host)
        for _ in range(2):  # the second job of a machine reads the first's probe (a failed one is run again)
            command = (f"set -euo pipefail; PATH={fake / name}:$PATH; HOST_PROBE_SAVED={saved}; "
                       f"source bench/host_probe.sh; host_probe {out}; echo went-on")
            done = subprocess.run(["bash", "-c", command],
                                  cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and done.stdout.strip() == "went-on", done.stderr
        first, second = out.read_text().splitlines()
        assert first == second
        assert saved.is_file() == (name == "ok")
        lines.append(first)
    assert lines[0].startswith("host: ") and ", plan_step 1.234 ms (bench/host_plan.py --crowd" in lines[0]
    assert ", plan_step ? ms (" in lines[1]
    job = tmp_path / "job"
    job.mkdir()
    (job / "gpu.txt").write_text(f"{H200}\n{lines[0]}\n")
    assert capacity_report.host_of(job).endswith("cores, plan_step 1.234 ms")
