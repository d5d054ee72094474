"""Workloads: JSON Lines with `id` and `text` per line (bench/workloads/README.md).

Pinned output length (random weights do not stop on their own in a meaningful place): a request's text of
`n` characters (Python code points) is spoken in `n / CHARS_PER_AUDIO_S` seconds of audio, i.e.

    frames = max(1, floor(len(text) / 15 * 12.5 + 0.5))    (halves round up)

at the codec's 12.5 frames per second. The summary reports the resulting mean audio seconds per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# the rule lives beside the scheduler's simulation, which shares it (engine/sched/listener.py)
from voxrt.engine.sched.listener import CHARS_PER_AUDIO_S, FRAMES_PER_S, PINNED_LENGTH_RULE, frames_at_rate, pinned_frames

__all__ = ["CHARS_PER_AUDIO_S", "FRAMES_PER_S", "PINNED_LENGTH_RULE", "WorkItem", "frames_at_rate", "load_workload",
           "pinned_frames"]


@dataclass(frozen=True)
class WorkItem:
    id: str
    text: str
    num_frames: int  # pinned output length (engine frames)


def load_workload(path: str | Path) -> list[WorkItem]:
    """Every non-empty line of a JSONL file; rows with empty text are skipped. Raises ValueError on a bad
    line or an empty workload."""
    items = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text = row["text"]
                item_id = str(row.get("id", number))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: expected a JSON object with a 'text', got {line[:80]!r}") \
                    from exc
            if not isinstance(text, str):
                raise ValueError(f"{path}:{number}: 'text' must be a string")
            if text.strip():
                items.append(WorkItem(item_id, text, pinned_frames(text)))
    if not items:
        raise ValueError(f"{path}: no requests in the workload")
    return items
