"""The `voxrt` command line, run as users run it."""

from __future__ import annotations

import subprocess
import sys
import wave

import pytest


def voxrt(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voxrt.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_bench_tiny_8_requests_prints_the_realtime_factor(tmp_path):
    # a sentence, not the default two (~9 s of audio each): the same rows, files and summary for a quarter of the work
    result = voxrt("bench", "--model", "tiny-lite", "--requests", "8", "--text", "The quick brown fox jumps.",
                   "--device", "cpu", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "realtime factor (wall / audio):" in out
    rows = [line for line in out.splitlines() if line.startswith("bench-")]
    assert len(rows) == 8 and all(line.split()[-1] == "length" for line in rows)
    wavs = sorted(tmp_path.glob("*.wav"))
    assert len(wavs) == 8
    with wave.open(str(wavs[0])) as f:
        assert f.getframerate() == 24000 and f.getnframes() > 24000


def test_bench_counts_requests_the_engine_refuses_instead_of_failing(tmp_path):
    """With an overload bound (`--max-admission-wait-ms`, off for bench by default) and room for one request, the
    others are refused (`server_busy`): rows with finish reason `refused`, a summary line that counts them, the
    figures and WAV files of the one served, exit code 0."""
    result = voxrt("bench", "--model", "tiny-lite", "--requests", "4", "--text", "The quick brown fox jumps.",
                   "--device", "cpu", "--max-batch-size", "1", "--max-live-requests", "1",
                   "--max-admission-wait-ms", "0", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("bench-")]
    assert sorted(row[-1] for row in rows) == ["length", "refused", "refused", "refused"]
    assert "3 of 4 refused by the engine (server_busy" in result.stdout
    assert "realtime factor (wall / audio):" in result.stdout
    assert len(list(tmp_path.glob("*.wav"))) == 1


def test_unknown_model_is_an_error_listing_the_available_ones():
    result = voxrt("bench", "--model", "nope", "--requests", "1")
    assert result.returncode != 0
    assert "unknown model 'nope'" in result.stderr and "tiny" in result.stderr


def test_models_lists_tiny():
    result = voxrt("models")
    assert result.returncode == 0 and "tiny" in result.stdout.split()


def test_profile_split_without_a_gpu_says_why(capsys):
    from voxrt.cli import main  # noqa: PLC0415

    assert main(["profile-split", "--model", "tiny"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--scheduler-type", "fastest"], ["--costs", "lm_base_ms"],
                                   ["--sm-modes", "32,x"], ["--sm-modes", "32,48", "--sm-mode", "5"],
                                   ["--sm-modes", "32", "--sm-mode", "adaptive"], ["--dec-batch", "0"],
                                   ["--max-codec-batch", "0"]])
def test_bad_engine_flags_are_clear_errors(flags):
    from voxrt.cli import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as info:
        main(["bench", "--model", "tiny", "--device", "cpu", "--requests", "1", *flags])
    assert "error" in str(info.value.code)


def test_a_fused_frame_path_for_a_model_without_one_is_a_clear_error(capsys):
    from voxrt.cli import main  # noqa: PLC0415

    code = main(["bench", "--model", "tiny", "--device", "cpu", "--requests", "1", "--frame-path", "fused"])
    assert code != 0
    assert "has no fused frame path" in capsys.readouterr().err


def test_make_checkpoint_finds_architectures_through_the_registry(capsys, monkeypatch, tmp_path):
    """The CLI imports no model package: `make-checkpoint --arch` resolves through models/registry.py, and an
    unknown architecture is a clear error listing the known ones."""
    import ast  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from voxrt import cli  # noqa: PLC0415
    from voxrt.models import registry  # noqa: PLC0415

    tree = ast.parse(Path(cli.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("voxrt.models")} == {"voxrt.models.registry"}

    assert cli.main(["make-checkpoint", "--arch", "qwen3-tts-9b", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown architecture 'qwen3-tts-9b'" in err and "qwen3-tts-1.7b" in err and "qwen3-tts-0.6b" in err
    _CALLS.clear()
    monkeypatch.setitem(registry.CHECKPOINT_MAKERS, "fake-arch", f"{__name__}:_fake_maker")
    assert cli.main(["make-checkpoint", "--arch", "fake-arch", str(tmp_path / "y"), "--seed", "3"]) == 0
    assert _CALLS == [("fake-arch", str(tmp_path / "y"), None, "auto", 3)]


_CALLS: list = []


def _fake_maker(arch, out_dir, tokenizer_dir, device, seed):
    _CALLS.append((arch, out_dir, tokenizer_dir, device, seed))


def test_max_batch_size_defaults_by_device_and_rejects_nonpositive():
    """256 on a GPU of 64 GiB or more, 128 below, 64 on the CPU (bench/results/2026-12-07-h100-batch256), picked
    by the engine process (the CLI leaves it None: a gateway process never imports torch to ask); an explicit
    value wins; < 1 is a clear error, not an engine that can never decode."""
    import torch  # noqa: PLC0415

    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415
    from voxrt.engine.runtime.core import BATCH_256_MIN_BYTES, batch_for_memory, default_max_batch_size  # noqa: PLC0415

    assert default_max_batch_size(torch.device("cpu")) == 64
    assert batch_for_memory(80 * 10**9) == batch_for_memory(BATCH_256_MIN_BYTES) == 256  # an H100, an H200
    assert batch_for_memory(BATCH_256_MIN_BYTES - 1) == batch_for_memory(48 * 2**30) == 128
    parser = build_parser()
    args = parser.parse_args(["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu"])
    assert _engine_config(args).max_batch_size is None
    args = parser.parse_args(["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu", "--max-batch-size", "8"])
    assert _engine_config(args).max_batch_size == 8
    args = parser.parse_args(["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu", "--max-batch-size", "0"])
    with pytest.raises(SystemExit, match="max-batch-size"):
        _engine_config(args)


def test_late_start_demotion_flag_reaches_the_engine_config_and_rejects_negative():
    """--deadline-late-start-demotion-ms: off (0) by default, a value (inf too) reaches EngineConfig, < 0 and NaN are
    clear errors (sched/deadline_policy.py, admission)."""
    import math  # noqa: PLC0415

    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    base = ["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu"]
    parser = build_parser()
    assert _engine_config(parser.parse_args(base)).late_start_demotion_ms == 0.0
    args = parser.parse_args(base + ["--deadline-late-start-demotion-ms", "2000"])
    assert _engine_config(args).late_start_demotion_ms == 2000.0
    args = parser.parse_args(base + ["--deadline-late-start-demotion-ms", "inf"])
    assert math.isinf(_engine_config(args).late_start_demotion_ms)
    for bad in ("-1", "nan"):
        args = parser.parse_args(base + ["--deadline-late-start-demotion-ms", bad])
        with pytest.raises(SystemExit, match="late-start-demotion-ms"):
            _engine_config(args)


def test_the_codec_batch_flag_is_left_to_the_engine_unless_given():
    """--max-codec-batch unset: None, the engine picks by device (runtime/core.py, default_max_codec_batch)."""
    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    parser = build_parser()
    assert _engine_config(parser.parse_args(["serve", "--device", "cpu"])).max_codec_batch is None
    args = parser.parse_args(["serve", "--device", "cpu", "--max-codec-batch", "24"])
    assert _engine_config(args).max_codec_batch == 24


def test_late_chunk_hold_flag_reaches_the_engine_config_and_rejects_bad_values():
    """--deadline-late-chunk-hold-ms: auto by default for serve and loadgen (the engine picks: 100 ms on CUDA with
    the deadline policy, else off) and off for bench (its requests all arrive at once), a value reaches
    EngineConfig; 0, < 0, NaN, inf and words are clear errors (the deadline policy's overload detection,
    sched/deadline_policy.py)."""
    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    parser = build_parser()
    assert _engine_config(parser.parse_args(["bench", "--device", "cpu"])).late_chunk_hold_ms is None
    for base in (["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu"],
                 ["serve", "--device", "cpu"]):
        assert _engine_config(parser.parse_args(base)).late_chunk_hold_ms == "auto"
        args = parser.parse_args(base + ["--deadline-late-chunk-hold-ms", "off"])
        assert _engine_config(args).late_chunk_hold_ms is None
        args = parser.parse_args(base + ["--deadline-late-chunk-hold-ms", "100"])
        assert _engine_config(args).late_chunk_hold_ms == 100.0
        for bad in ("0", "-1", "nan", "inf", "soon", ""):
            args = parser.parse_args(base + ["--deadline-late-chunk-hold-ms", bad])
            with pytest.raises(SystemExit, match="late-chunk-hold-ms must be auto, off or a finite number > 0"):
                _engine_config(args)


def test_max_admission_wait_flag_reaches_the_engine_config_and_rejects_bad_values():
    """--max-admission-wait-ms: auto by default for serve and loadgen (the engine picks: 100 ms on CUDA, off on the
    CPU) and off for bench and profile-split (their requests all arrive at once), off is None, a value reaches
    EngineConfig, < 0, NaN, inf and words are clear errors (overload protection, sched/scheduler.py)."""
    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    parser = build_parser()
    for base in (["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu"],
                 ["serve", "--device", "cpu"]):
        assert _engine_config(parser.parse_args(base)).max_admission_wait_ms == "auto"
        assert _engine_config(parser.parse_args(base + ["--max-admission-wait-ms", "off"])).max_admission_wait_ms is None
        args = parser.parse_args(base + ["--max-admission-wait-ms", "100"])
        assert _engine_config(args).max_admission_wait_ms == 100.0
        assert _engine_config(parser.parse_args(base + ["--max-admission-wait-ms", "0"])).max_admission_wait_ms == 0.0
        for bad in ("-1", "nan", "inf", "soon", ""):
            args = parser.parse_args(base + ["--max-admission-wait-ms", bad])
            with pytest.raises(SystemExit, match="max-admission-wait-ms must be auto, off or a finite number"):
                _engine_config(args)
    for batch in (["bench", "--device", "cpu"], ["profile-split", "--device", "cpu"]):
        assert _engine_config(parser.parse_args(batch)).max_admission_wait_ms is None
        args = parser.parse_args(batch + ["--max-admission-wait-ms", "auto"])
        assert _engine_config(args).max_admission_wait_ms == "auto"


def test_admission_text_wait_flag_reaches_the_engine_config_and_rejects_bad_values():
    """--admission-text-wait-ms: 50 by default (an agent's first token gap counts), a value reaches
    EngineConfig, < 0, NaN and inf are clear errors."""
    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    parser = build_parser()
    base = ["serve", "--device", "cpu"]
    assert _engine_config(parser.parse_args(base)).admission_text_wait_ms == 50.0
    assert _engine_config(parser.parse_args(base + ["--admission-text-wait-ms", "0"])).admission_text_wait_ms == 0.0
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit, match="admission-text-wait-ms must be"):
            _engine_config(parser.parse_args(base + ["--admission-text-wait-ms", bad]))


def test_the_default_overload_bound_is_on_for_cuda_only():
    """EngineConfig's "auto" bound resolves by device: ADMISSION_WAIT_MS on CUDA; off on the CPU (a step of a
    model on a loaded CPU may take longer than the bound); explicit values are kept on either. EngineConfig itself
    defaults to off (library users, batches and the GPU checks keep every request)."""
    from voxrt.engine.messages import ADMISSION_WAIT_MS, EngineConfig, admission_wait_ms  # noqa: PLC0415

    assert EngineConfig().max_admission_wait_ms is None
    assert admission_wait_ms("auto", "cuda") == ADMISSION_WAIT_MS == 100.0
    assert admission_wait_ms("auto", "cpu") is None
    assert admission_wait_ms(None, "cuda") is None
    assert admission_wait_ms(40.0, "cpu") == 40.0 and admission_wait_ms(0.0, "cuda") == 0.0
    with pytest.raises(ValueError, match="max_admission_wait_ms"):
        admission_wait_ms("soon", "cuda")


def test_the_default_late_chunk_hold_is_on_for_the_deadline_policy_on_cuda_only():
    """EngineConfig's "auto" late-chunk hold resolves by device and policy: LATE_CHUNK_HOLD_MS on CUDA with the
    deadline policy (the only one whose chunks all have deadlines), off on the CPU and with the other policies;
    explicit values are kept (the engine warns that another policy ignores them). EngineConfig defaults to off."""
    from voxrt.engine.messages import LATE_CHUNK_HOLD_MS, EngineConfig, late_chunk_hold_ms  # noqa: PLC0415

    assert EngineConfig().late_chunk_hold_ms is None
    assert late_chunk_hold_ms("auto", "cuda", "deadline") == LATE_CHUNK_HOLD_MS == 100.0
    assert late_chunk_hold_ms("auto", "cpu", "deadline") is None
    for policy in ("base", "online", "offline"):
        assert late_chunk_hold_ms("auto", "cuda", policy) is None
    assert late_chunk_hold_ms(None, "cuda", "deadline") is None
    assert late_chunk_hold_ms(40.0, "cpu", "deadline") == 40.0 and late_chunk_hold_ms(40.0, "cuda", "base") == 40.0
    with pytest.raises(ValueError, match="late_chunk_hold_ms"):
        late_chunk_hold_ms("soon", "cuda", "deadline")


@pytest.mark.parametrize("flags, message", [
    (["--dp-size", "0"], "--dp-size must be an integer >= 1"),
    (["--dp-size", "2", "--device", "cuda:1"], "names one device"),
    (["--dp-size", "2", "--engine-socket", "/tmp/x.sock"], "names one engine's socket"),
    (["--codec-sms", "32"], "--codec-sms needs --codec-gpu"),
])
def test_bad_replica_flags_are_clear_errors(capsys, flags, message):
    from voxrt.cli import main  # noqa: PLC0415

    with pytest.raises(SystemExit):
        main(["serve", "--model", "tiny", *flags])
    assert message in capsys.readouterr().err


def test_codec_gpu_is_refused_with_the_reason(capsys):
    """Disaggregation is designed (docs/multi-gpu.md), not built: refused, with the GPU count where it falls
    short, never served some other way."""
    import torch  # noqa: PLC0415

    from voxrt.cli import main  # noqa: PLC0415

    with pytest.raises(SystemExit):
        main(["serve", "--model", "tiny", "--codec-gpu", "1", "--codec-sms", "32"])
    err = capsys.readouterr().err
    if torch.cuda.device_count() < 2:
        assert "needs 2 GPUs" in err and f"this machine has {torch.cuda.device_count()}" in err
    else:
        assert "not built yet" in err


@pytest.mark.parametrize("command, name, value, message", [
    (["serve", "--model", "tiny"], "VOXRT_GC_YOUNG_THRESHOLD", "lots",
     "VOXRT_GC_YOUNG_THRESHOLD must be a positive integer"),
    (["serve", "--model", "tiny"], "VOXRT_PORT", "http", "VOXRT_PORT must be a port number"),
    (["serve", "--model", "tiny"], "VOXRT_PDL", "sometimes", "VOXRT_PDL='sometimes'; expected auto, on (1) or off (0)"),
    (["serve", "--model", "tiny"], "VOXRT_GEMV", "warps=3", "VOXRT_GEMV: warps=3 out of range"),
    (["serve", "--model", "tiny"], "VOXRT_SAMPLER_SEARCH", "bogo", "VOXRT_SAMPLER_SEARCH='bogo'"),
    (["serve", "--model", "tiny"], "VOXRT_SAMPLER_WARPS", "3", "VOXRT_SAMPLER_WARPS='3': expected"),
    (["serve", "--model", "tiny"], "VOXRT_DECODE_ATTENTION", "fa9", "VOXRT_DECODE_ATTENTION='fa9': choose one of"),
    (["serve", "--model", "tiny"], "VOXRT_PAGED_DECODE_CONFIG", "12", "VOXRT_PAGED_DECODE_CONFIG='12': expected"),
    (["serve", "--model", "tiny"], "VOXRT_PAGED_DECODE_ROPE", "maybe", "VOXRT_PAGED_DECODE_ROPE='maybe'; expected on or off"),
    (["serve", "--model", "tiny"], "VOXRT_PREDICTOR_QKV_TABLE", "2", "VOXRT_PREDICTOR_QKV_TABLE='2'; expected on or off"),
    (["loadgen", "--url", "ws://127.0.0.1:9/v1/realtime", "--workload", "w.jsonl", "--out", "out"],
     "VOXRT_GC_YOUNG_THRESHOLD", "0", "VOXRT_GC_YOUNG_THRESHOLD must be a positive integer"),
])
def test_bad_environment_knobs_are_clear_errors_before_anything_starts(capsys, monkeypatch, tmp_path, command, name,
                                                                         value, message):
    from voxrt.cli import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as info:
        main(command)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before it made anything


def test_first_chunk_frames_flag_reaches_the_engine_config_and_rejects_below_one():
    """--first-chunk-frames: None (the model program's own) by default, a value reaches EngineConfig, < 1 is a
    clear error before any engine starts (a size above the program's chunk is the engine's typed error)."""
    from voxrt.cli import _engine_config, build_parser  # noqa: PLC0415

    base = ["loadgen", "--engine-direct", "--workload", "w.jsonl", "--out", "o", "--device", "cpu"]
    parser = build_parser()
    assert _engine_config(parser.parse_args(base)).first_chunk_frames is None
    assert _engine_config(parser.parse_args(base + ["--first-chunk-frames", "4"])).first_chunk_frames == 4
    with pytest.raises(SystemExit, match="--first-chunk-frames must be >= 1"):
        _engine_config(parser.parse_args(base + ["--first-chunk-frames", "0"]))


def test_the_stand_in_refuses_a_first_chunk_size():
    from voxrt.engine.messages import EngineConfig  # noqa: PLC0415
    from voxrt.engine.standin import StandInCore  # noqa: PLC0415

    with pytest.raises(ValueError, match="stand-in's chunks are fixed"):
        StandInCore(EngineConfig(model="standin", first_chunk_frames=4))
