"""The examples run: the WAV example against a live server, the sounddevice example's missing-package path."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import wave
from pathlib import Path



EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_stream_tokens_to_wav_writes_a_valid_wav(live, tmp_path):
    out = tmp_path / "out.wav"
    result = subprocess.run([sys.executable, str(EXAMPLES / "stream_tokens_to_wav.py"), "--url", live.ws,
                             "--out", str(out), "--token-delay-ms", "1", "--text", "Hello from the example."],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and "reason completed" in result.stdout
    with wave.open(str(out), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
        num_samples = wav.getnframes()
        assert num_samples > 0 and len(wav.readframes(num_samples)) == num_samples * 2


def test_stream_tokens_to_wav_reports_errors(live, tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / "stream_tokens_to_wav.py"), "--url", live.ws,
                             "--out", str(tmp_path / "x.wav"), "--voice", "nobody"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "unknown_voice" in result.stderr


def test_play_sounddevice_says_how_to_install_it(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("voxrt_example_play_sounddevice", EXAMPLES / "play_sounddevice.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # `import sounddevice` raises ImportError
    assert example.main(["hello"]) == 2
    assert "pip install sounddevice" in capsys.readouterr().err


class _FakeOutputStream:
    """Stands in for sounddevice.RawOutputStream: keeps what is written."""

    written: list[bytes] = []
    latency = 0.05  # seconds of audio queued in the device

    def __init__(self, *, samplerate: int, channels: int, dtype: str) -> None:
        assert (samplerate, channels, dtype) == (24000, 1, "int16")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))


def test_play_sounddevice_plays_and_reports_playback(live, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("voxrt_example_play_sounddevice", EXAMPLES / "play_sounddevice.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    fake = types.ModuleType("sounddevice")
    fake.RawOutputStream = _FakeOutputStream
    monkeypatch.setitem(sys.modules, "sounddevice", fake)
    assert example.main(["Played through a fake sound card.", "--url", live.ws]) == 0
    assert sum(len(chunk) for chunk in _FakeOutputStream.written) > 24000  # more than half a second
    assert "played" in capsys.readouterr().out
