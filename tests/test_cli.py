"""The `voxrt` command line, run as users run it."""

from __future__ import annotations

import subprocess
import sys
import wave

import pytest


def voxrt(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voxrt.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_bench_tiny_8_requests_prints_the_realtime_factor(tmp_path):
    result = voxrt("bench", "--model", "tiny-lite", "--requests", "8", "--device", "cpu", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "realtime factor (wall / audio):" in out
    rows = [line for line in out.splitlines() if line.startswith("bench-")]
    assert len(rows) == 8 and all(line.split()[-1] == "length" for line in rows)
    wavs = sorted(tmp_path.glob("*.wav"))
    assert len(wavs) == 8
    with wave.open(str(wavs[0])) as f:
        assert f.getframerate() == 24000 and f.getnframes() > 24000


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
                                   ["--sm-modes", "32", "--sm-mode", "adaptive"], ["--dec-batch", "0"]])
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
