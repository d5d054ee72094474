from __future__ import annotations

import numpy as np
import pytest

from audio_signals import odd_chunks, speechlike
from voxrt.audio import Framer


@pytest.mark.parametrize("samples_per_frame", [1, 160, 960, 2880])
def test_frames_reassemble_the_input(samples_per_frame):
    x = speechlike(10_001)
    framer = Framer(samples_per_frame)
    frames = [frame for chunk in odd_chunks(x) for frame in framer.push(chunk)]
    tail = framer.finish()
    assert all(frame.shape == (samples_per_frame,) and frame.dtype == np.float32 for frame in frames)
    remainder = 10_001 % samples_per_frame
    assert len(frames) == 10_001 // samples_per_frame
    if remainder:
        assert tail.shape == (remainder,)
        np.testing.assert_array_equal(np.concatenate([*frames, tail]), x)
    else:
        assert tail is None
        np.testing.assert_array_equal(np.concatenate(frames), x)


def test_remainder_carries_across_pushes():
    framer = Framer(4)
    assert framer.push(np.arange(3, dtype=np.float32)) == []
    assert framer.num_pending_samples == 3
    frames = framer.push(np.arange(3, 9, dtype=np.float32))
    assert [f.tolist() for f in frames] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert framer.finish().tolist() == [8]
    assert framer.finish() is None  # empty after finish, and reusable
    assert [f.tolist() for f in framer.push(np.ones(4, dtype=np.float32))] == [[1, 1, 1, 1]]


def test_frames_do_not_alias_the_callers_buffer():
    framer = Framer(2)
    buffer = np.arange(4, dtype=np.float32)
    frames = framer.push(buffer)
    buffer[:] = -1
    assert [f.tolist() for f in frames] == [[0, 1], [2, 3]]


def test_empty_push_and_no_input():
    framer = Framer(8)
    assert framer.push(np.zeros(0, dtype=np.float32)) == []
    assert framer.finish() is None


@pytest.mark.parametrize("bad", [0, -1, 2.5, None])
def test_bad_frame_size(bad):
    with pytest.raises(ValueError, match="positive integer"):
        Framer(bad)
