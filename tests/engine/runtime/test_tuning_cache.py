"""runtime/tuning_cache.py: a program's timed kernel choices kept between starts, keyed on what they depend on; the
cache never stops a start (off, missing, unreadable, another key, an unwritable folder: logged, timing as before)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from voxrt.engine.runtime import tuning_cache
from voxrt.engine.runtime.tuning_cache import TuningCache, cache_dir


class Program:
    """What the cache reads of a program: its key, its chosen state, and taking a state back."""

    name = "fake/prog"

    def __init__(self, key=None, state=None):
        self.key = {"code": "abc"} if key is None else key
        self.state = dict(state or {})
        self.restored = []

    def tuning_key(self):
        return self.key

    def tuning_state(self):
        return self.state

    def restore_tuning(self, state):
        self.restored.append(state)
        self.state = dict(state)
        return sum(len(v) for v in state.values())


CPU = torch.device("cpu")


def _cache(program, tmp_path, lanes="lanes off"):
    return TuningCache.for_program(program, CPU, lanes, environ={"VOXRT_TUNING_CACHE": str(tmp_path)})


def test_the_folder_follows_the_environment(tmp_path):
    assert cache_dir({"VOXRT_TUNING_CACHE": "off"}) is None
    assert cache_dir({"VOXRT_TUNING_CACHE": str(tmp_path / "t")}) == tmp_path / "t"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "voxrt" / "tuning"
    assert cache_dir({}).parts[-3:] == (".cache", "voxrt", "tuning")
    assert cache_dir({"HOME": "/home/voxrt"}) == Path("/home/voxrt/.cache/voxrt/tuning")
    assert TuningCache.for_program(Program(), CPU, "x", environ={"VOXRT_TUNING_CACHE": "off"}) is None
    program = Program()
    program.key = None  # a program that times nothing has no file
    assert TuningCache.for_program(program, CPU, "x", environ={"VOXRT_TUNING_CACHE": str(tmp_path)}) is None


def test_saved_choices_come_back_at_the_next_start_and_an_unchanged_state_is_not_written_again(tmp_path, caplog):
    first = Program(state={"codec": {"layer.1": [[[2, 8, 29], "float32", False, False, "products"]]}})
    cache = _cache(first, tmp_path)
    assert cache.restore() == 0 and first.restored == []  # the first start: no file
    path = cache.save()
    assert path is not None and path.parent == tmp_path and path.name.startswith("fake_prog-")
    saved = json.loads(path.read_text())
    assert saved["key"]["program"] == {"code": "abc"} and saved["key"]["lanes"] == "lanes off"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    second = Program()
    again = _cache(second, tmp_path)
    with caplog.at_level(logging.INFO, logger="voxrt.engine.tuning"):
        assert again.restore() == 1
    assert second.restored == [first.state] and "1 kernel choices restored" in caplog.text
    mtime = path.stat().st_mtime_ns
    assert again.save() is None and path.stat().st_mtime_ns == mtime  # nothing new
    second.state["codec"]["layer.2"] = [[[1, 4, 9], "float32", True, False, "cudnn"]]
    assert again.save() == path and len(json.loads(path.read_text())["state"]["codec"]) == 2
    assert _cache(Program(state={}), tmp_path).save() is None  # nothing chosen: nothing written


def test_another_key_has_another_file_and_a_file_for_another_key_is_not_taken(tmp_path, caplog):
    program = Program(state={"codec": {"a": [1]}})
    path = _cache(program, tmp_path, lanes="LM 68 SMs | codec 64").save()
    other = _cache(Program(), tmp_path, lanes="LM 76 SMs | codec 56")
    assert other.path != path and other.restore() == 0
    other.path = path  # the same name, written for another key (a hash collision, an edited file)
    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert other.restore() == 0
    assert "written for another GPU" in caplog.text
    assert _cache(Program(key={"code": "changed"}), tmp_path, lanes="LM 68 SMs | codec 64").path != path


@pytest.mark.parametrize("text", ["{not json", "[]", json.dumps({"key": None})])
def test_an_unreadable_file_is_said_and_timing_goes_on(tmp_path, caplog, text):
    program = Program()
    cache = _cache(program, tmp_path)
    cache.path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert cache.restore() == 0
    assert program.restored == [] and str(cache.path) in caplog.text


def test_a_state_the_program_rejects_is_said_and_timing_goes_on(tmp_path, caplog):
    class Picky(Program):
        def restore_tuning(self, state):
            raise AttributeError("not a list")

    _cache(Program(state={"codec": {"a": [1]}}), tmp_path).save()
    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert _cache(Picky(), tmp_path).restore() == 0
    assert "unreadable (AttributeError: not a list)" in caplog.text


def test_a_folder_that_cannot_be_written_leaves_the_start_alone(tmp_path, caplog):
    """A folder that cannot be made or written (here its path is a file, which stops root as well)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = TuningCache.for_program(Program(state={"codec": {"a": [1]}}), CPU, "x",
                                    environ={"VOXRT_TUNING_CACHE": str(blocker)})
    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert cache.save() is None and cache.restore() == 0
    assert "cannot write it" in caplog.text


def test_the_device_key_names_the_libraries():
    key = tuning_cache.device_key(CPU)
    assert key == {"device": "cpu", "torch": torch.__version__}


def test_a_program_whose_key_fails_gets_no_cache_and_the_start_goes_on(tmp_path, caplog):
    class Broken(Program):
        def tuning_key(self):
            raise OSError("source file gone")

    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert _cache(Broken(), tmp_path) is None
    assert "no key for fake/prog (OSError: source file gone)" in caplog.text


def test_a_state_that_cannot_be_made_or_written_is_said_and_not_saved(tmp_path, caplog):
    class Failing(Program):
        def tuning_state(self):
            raise RuntimeError("layer gone")

    cache = _cache(Failing(), tmp_path)
    with caplog.at_level(logging.WARNING, logger="voxrt.engine.tuning"):
        assert cache.save() is None
    assert "nothing saved (RuntimeError: layer gone)" in caplog.text and not list(tmp_path.iterdir())
