"""When each audio chunk is due, and what a codec launch of some chunks costs (PURE: time is an argument).

The rule (design notes, "Deadlines"): a listener plays a stream's audio in real time from its first chunk on,
so the chunk that starts at frame f is due when the listener finishes the f frames before it.

- The first chunk (f == 0) is due `startup_ns` (the TTFA target) after the request arrived, unless a playback
  report says the listener reaches this request's audio later than that: a request whose audio follows other
  audio of the same stream (a prompt-at-once program's next segment, gateway/context.py) is reported with
  `played_samples` < 0, the audio still ahead of it, and its first chunk is due when that has played.
- Every deadline is moved `margin_ns` earlier (`--deadline-margin-ms`): the listener needs the audio, and a
  chunk the GPU completed still has to be seen between LM steps, sent to the gateway and to the client.
- The audio before the chunk at frame f is `ProgramSpec.samples_before(f)`: f * samples_per_frame, less the lag
  of a codec that lags its input (`codec_delay_samples`: its first chunk comes that much short), written
  S(f) below.
- With a playback report (`request.playback`: `played_samples` heard by `anchor_ns`), the listener reaches
  frame f at `anchor_ns + (S(f) - played_samples) / samples_per_frame * frame_ns`. A report
  that says the listener is stalled makes the chunk overdue: due at `anchor_ns`, already past.
- Without a report, playback is assumed to have started when the first chunk completed
  (`first_chunk_ns + S(f) / samples_per_frame * frame_ns`); while chunk 0 is still in flight, at its own deadline
  (`arrival_ns + startup_ns + S(f) / samples_per_frame * frame_ns`).

A codec launch costs what the runner does with it: chunks are grouped by size (a last chunk of an odd size runs
padded up to the next captured size), each group in launches of at most `max_batch` chunks, each launch
`CostModel.codec_ms(batch, frames)`; an empty last chunk costs nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.plan import CodecJob, ProgramSpec
from voxrt.engine.sched.request import Request


def chunk_deadline_ns(request: Request, first_frame: int, spec: ProgramSpec, startup_ns: int,
                      margin_ns: int = 0) -> int:
    """When the chunk of `request` that starts at frame `first_frame` must have completed (see the module
    docstring for the rule), `margin_ns` early: the time a completed chunk takes to reach the listener."""
    start_due_ns = request.arrival_ns + startup_ns
    anchor = request.playback
    if first_frame == 0 and (anchor is None or anchor.is_stalled or anchor.played_samples >= 0):
        return start_due_ns - margin_ns
    if anchor is not None:
        if anchor.is_stalled:
            return anchor.anchor_ns
        ahead_samples = spec.samples_before(first_frame) - anchor.played_samples
        return anchor.anchor_ns + round(ahead_samples / spec.samples_per_frame * spec.frame_ns) - margin_ns
    start_ns = request.first_chunk_ns if request.first_chunk_ns is not None else start_due_ns
    return start_ns + round(spec.samples_before(first_frame) / spec.samples_per_frame * spec.frame_ns) - margin_ns


def with_deadline(job: CodecJob, spec: ProgramSpec, startup_ns: int, margin_ns: int = 0) -> CodecJob:
    """The job with its `deadline_ns` set by `chunk_deadline_ns`."""
    return replace(job, deadline_ns=chunk_deadline_ns(job.request, job.first_frame, spec, startup_ns, margin_ns))


def launch_frames(job: CodecJob, spec: ProgramSpec) -> int:
    """Frames the codec runs for this job: its own, or a last chunk of an odd size padded to the next size."""
    frames = job.num_frames
    if frames == 0 or not job.is_last:
        return frames
    bigger = [s for s in spec.codec_sizes if s >= frames]
    return min(bigger) if bigger else frames


def codec_launch_ms(costs: CostModel, jobs: Iterable[CodecJob], spec: ProgramSpec, max_batch: int) -> float:
    """Estimated time of running `jobs` as the runner does: one launch per size, `max_batch` chunks at most."""
    groups: dict[int, int] = {}  # launch frames -> chunks
    for job in jobs:
        frames = launch_frames(job, spec)
        if frames:
            groups[frames] = groups.get(frames, 0) + 1
    total = 0.0
    for frames, count in groups.items():
        full, rest = divmod(count, max_batch)
        total += full * costs.codec_ms(max_batch, frames) + (costs.codec_ms(rest, frames) if rest else 0.0)
    return total

