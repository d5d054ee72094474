"""What a model program chose by timing kernels at start-up, kept on disk so that the next start restores it.

Qwen3-TTS's codec times each conv shape's formulations (cuDNN, cuBLAS products, a Triton tap kernel) the first
time the shape runs, while the engine captures its graphs (`codec_layers._timed_choice`): 9.8 s of an H100's
start-up on one host, 25 s on a slower one (bench/results/2026-12-07-h100-codecfix/). Every formulation computes
the same conv (tests/models/qwen3_tts/test_codec_parity.py); the choice only decides speed, so a restored choice
can cost time where conditions changed, never correctness. The file is keyed on what the timings depend on (the
GPU, its SM count, the libraries, the lanes' SM split, the program's own key: its code and settings); any
difference gives another file, and the shapes it lacks are timed as before.

`VOXRT_TUNING_CACHE`: the folder (default `$XDG_CACHE_HOME/voxrt/tuning`, else `~/.cache/voxrt/tuning`), or `off`.
A folder that cannot be read or written is logged and the engine times as before: the cache never stops a start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("voxrt.engine.tuning")

ENV = "VOXRT_TUNING_CACHE"
FORMAT = 1


def cache_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The folder of the tuning files, or None when `VOXRT_TUNING_CACHE=off`."""
    env = os.environ if environ is None else environ
    value = env.get(ENV, "").strip()
    if value.lower() in ("off", "0", "none", "false"):
        return None
    if value:
        return Path(value).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "voxrt" / "tuning"


def device_key(device: torch.device) -> dict[str, Any]:
    """What kernel timings depend on beyond the program: the GPU and the libraries."""
    key: dict[str, Any] = {"device": device.type, "torch": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        key.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
        try:
            import triton  # noqa: PLC0415

            key["triton"] = triton.__version__
        except ImportError:
            key["triton"] = None
    return key


class TuningCache:
    """One program's tuning file for one key: `restore` before the timed work, `save` after it."""

    def __init__(self, program, key: dict[str, Any], directory: Path) -> None:
        self.program = program
        self.key = key
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(getattr(program, "name", "program")))
        self.path = directory / f"{name}-{digest}.json"
        self.num_restored = 0
        self._restored_state: Any = None  # the file's state as read: a save with nothing new is skipped

    @classmethod
    def for_program(cls, program, device: torch.device, lanes: str,
                    environ: dict[str, str] | None = None) -> "TuningCache | None":
        """The cache of `program` on `device` with the lanes `lanes` (their description: the SM split), or None:
        the cache is off, or the program has nothing it tunes (`ModelProgram.tuning_key` None)."""
        directory = cache_dir(environ)
        if directory is None:
            return None
        try:
            program_key = program.tuning_key()
            if program_key is None:
                return None
            return cls(program, {"format": FORMAT, **device_key(device), "lanes": lanes, "program": program_key},
                       directory)
        except Exception as exc:  # noqa: BLE001 (the cache never stops a start)
            log.warning("tuning cache: no key for %s (%s: %s); timing as without it", getattr(program, "name", "?"),
                        type(exc).__name__, exc)
            return None

    def restore(self) -> int:
        """Put the saved choices back into the program (`ModelProgram.restore_tuning`); how many it took. A file
        that is missing is the first start; one that cannot be read, or was written for another key, is said and
        left (the start times as before and `save` replaces it)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        except OSError as exc:
            log.warning("tuning cache %s: cannot read it (%s); timing as without it", self.path, exc)
            return 0
        try:
            saved = json.loads(text)
            if not isinstance(saved, dict) or saved.get("key") != json.loads(json.dumps(self.key, default=str)):
                log.warning("tuning cache %s: written for another GPU, library or setting; timing again", self.path)
                return 0
            state = saved.get("state") or {}
            self.num_restored = int(self.program.restore_tuning(state))
            self._restored_state = json.loads(json.dumps(state))  # a copy: the program may keep and change it
        except Exception as exc:  # noqa: BLE001 (bad JSON, a state the program rejects: the start goes on)
            log.warning("tuning cache %s: unreadable (%s: %s); timing as without it", self.path,
                        type(exc).__name__, exc)
            return 0
        log.info("tuning cache: %d kernel choices restored from %s (%s=off times them again)", self.num_restored,
                 self.path, ENV)
        return self.num_restored

    def save(self) -> Path | None:
        """Write what the program chose (`ModelProgram.tuning_state`), replacing the file at once (a temporary
        file renamed over it: a reader never sees half a file); the path, or None when there was nothing to save
        or nothing new, or the folder could not be written (said in the log)."""
        try:
            state = self.program.tuning_state()
            if not state:
                return None
            data = json.dumps({"key": self.key, "state": state}, sort_keys=True, default=str)
        except Exception as exc:  # noqa: BLE001 (the cache never stops a start)
            log.warning("tuning cache %s: nothing saved (%s: %s)", self.path, type(exc).__name__, exc)
            return None
        if self._restored_state is not None and json.loads(data)["state"] == self._restored_state:
            return None  # every choice came from the file: nothing new to write
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("tuning cache %s: cannot write it (%s); the next start times again", self.path, exc)
            return None
        log.info("tuning cache: kernel choices saved to %s", self.path)
        return self.path
