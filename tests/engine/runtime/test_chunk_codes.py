"""The codes of a codec launch (runner._chunk_codes): each job's frames, zero padding past a job's frames and
past the jobs, equal to building them as nested lists."""

import random
from types import SimpleNamespace

import numpy as np
import pytest

from voxrt.engine.runtime.runner import _chunk_codes

K = 4


def _job(num_frames: int, first: int, rng: random.Random) -> SimpleNamespace:
    frames = [tuple(rng.randrange(2048) for _ in range(K)) for _ in range(first + num_frames + 3)]
    return SimpleNamespace(request=SimpleNamespace(frames=frames), first_frame=first, num_frames=num_frames)


def _nested(jobs, size: int, frames: int) -> np.ndarray:
    rows = [list(j.request.frames[j.first_frame : j.first_frame + j.num_frames]) + [(0,) * K] * (frames - j.num_frames)
            for j in jobs]
    return np.array(rows + [[(0,) * K] * frames] * (size - len(jobs)), dtype=np.int64).reshape(size, frames, K)


@pytest.mark.parametrize(("lengths", "size", "frames"), [
    ((17,) * 15, 16, 17),  # full jobs, one padding row: the one-conversion path
    ((17, 5, 0), 4, 17),  # a short last chunk and an empty job: padded per job
    ((2,), 1, 2),
    ((), 2, 3),  # no jobs: all padding
])
def test_chunk_codes_equal_the_nested_lists(lengths, size, frames):
    rng = random.Random(len(lengths) * 100 + size)
    jobs = [_job(n, first=rng.randrange(5), rng=rng) for n in lengths]
    out = _chunk_codes(jobs, size, frames, K)
    assert out.dtype == np.int64 and out.shape == (size, frames, K)
    np.testing.assert_array_equal(out, _nested(jobs, size, frames))
