"""`--trace-dir`: one JSON line per decision (`plan`) and per launch (`lm`, `codec` with its GPU time), so a
run can be replayed and the scheduler's choices checked against what the GPU did. Times in milliseconds on
the engine's monotonic clock. On a GPU an `lm` record also carries `gpu_idle_ms`, the LM lane's idle time
between the previous LM step's end and this one's start (CUDA events, read when the step's frames are, a step
later: tracing adds no wait). A `step` record per loop step has the host's ms in each phase of it (collect,
schedule, launch_lm, submit_codec, update_lm with wait_lm inside it, collect_end) and `outside_ms`, the time
between two steps (the engine process delivering events and reading commands). A `request` record per request
whose last chunk was delivered has its timeline: `arrival_ms` (the first-audio clock's start), `submit_ms`,
`text_ms` (its first text), `final_ms` (its text final), `admitted_ms` (the step that prefilled it), its first
chunk's `first_launch_ms`, `first_done_ms`, `first_deadline_ms` and `first_lane`, and the count of `appends` and
playback `reports`: where its time to first audio went inside the engine, per request."""

from __future__ import annotations

import json
import os
from pathlib import Path


class Tracer:
    def __init__(self, trace_dir: str) -> None:
        path = Path(trace_dir)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / f"engine-{os.getpid()}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)

    def write(self, **record) -> None:
        self._file.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
