"""Where a process's threads spent their time, from `py-spy record -f raw --threads` (collapsed stacks).

    python bench/pyspy_summary.py RUN.pyspy.txt [--thread MainThread] [--under EngineCore.step] [--top 30]
                                  [--rate 200 --seconds 30]

bench/gpu_product_path.sh writes one such file a run with PYSPY set (the engine process's threads, sampled without
pausing it). Printed: the samples of each thread; then, for the thread named by --thread (its name, e.g. MainThread or
voxrt-engine-send), the functions by inclusive share (the function or something it called was running) and by self
share (the function itself, the top of the stack); then, for each --under function, how its samples split among the
functions it called directly (`(self)`: in its own code). Functions are `qualname (file)`, line numbers dropped, so a
function's samples from every line add up. Shares are of the thread's samples: an idle thread (waiting in a system
call) still shows as sampled unless py-spy ran without --idle, which is its default (idle samples dropped).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>\d+)\): (?P<name>.*)$")


def frame_name(frame: str) -> str:
    """`qualname (file.py)` of a py-spy frame `qualname (path/file.py:line)`; other frames as they are."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    return f"{match['func']} ({Path(match['file']).name})"


def parse(lines) -> list[tuple[str, list[str], int]]:
    """(thread name, frames outermost first, samples) of each line of py-spy's raw output."""
    stacks = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {number}: not a collapsed stack ('frame;frame;... COUNT'): {line[:80]!r}")
        frames = stack.split(";")
        thread = ""
        match = _THREAD.match(frames[0])
        if match is not None:  # --threads: `thread (TID): NAME` comes first
            frames = frames[1:]
            thread = match["name"] or match["tid"]
        stacks.append((thread, [frame_name(f) for f in frames], int(count)))
    return stacks


def summarize(stacks, thread: str, under: list[str], top: int, expected: int | None = None) -> str:
    """`expected`: the samples a thread that never idled would have (py-spy's rate times its seconds): each
    thread's samples are then also a share of the run (the rest it waited: in a system call, or for the GIL)."""
    out = []
    per_thread = Counter()
    for name, _, count in stacks:
        per_thread[name] += count
    total_all = sum(per_thread.values())
    out.append(f"samples: {total_all}" + (f" (a thread busy throughout: {expected})" if expected else ""))
    for name, count in per_thread.most_common():
        share = f"  {100 * count / expected:5.1f}% of the run" if expected else ""
        out.append(f"  {count:8d}{share}  {name or '(no thread)'}")
    mine = [(frames, count) for name, frames, count in stacks if name == thread]
    total = sum(count for _, count in mine)
    if not total:
        out.append(f"no samples of thread {thread!r}")
        return "\n".join(out)
    inclusive, own = Counter(), Counter()
    for frames, count in mine:
        for name in set(frames):  # a recursive function counts once a sample
            inclusive[name] += count
        if frames:
            own[frames[-1]] += count
    for title, counter in (("inclusive", inclusive), ("self", own)):
        out.append(f"\n{thread}: functions by {title} share of its {total} samples")
        for name, count in counter.most_common(top):
            out.append(f"  {100 * count / total:6.1f}%  {name}")
    for target in under:
        parts, seen = Counter(), 0
        for frames, count in mine:
            matches = [i for i, name in enumerate(frames) if name.split(" (")[0] == target or name == target]
            if not matches:
                continue
            i = matches[0]  # the outermost call: a recursive one's samples count once
            seen += count
            parts[frames[i + 1] if i + 1 < len(frames) else "(self)"] += count
        out.append(f"\nunder {target}: {seen} samples ({100 * seen / total:.1f}% of {thread}'s)")
        for name, count in parts.most_common(top):
            out.append(f"  {100 * count / max(seen, 1):6.1f}%  {name}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--thread", default="MainThread", help="the thread whose functions are listed (its name)")
    ap.add_argument("--under", action="append", default=[],
                    help="a function (qualname) whose direct callees are split out; may repeat")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--rate", type=float, help="py-spy's samples a second (-r); with --seconds, each thread's "
                    "samples as a share of the run")
    ap.add_argument("--seconds", type=float, help="py-spy's duration (-d)")
    args = ap.parse_args(argv)
    with open(args.path, encoding="utf-8") as f:
        stacks = parse(f)
    expected = round(args.rate * args.seconds) if args.rate and args.seconds else None
    print(summarize(stacks, args.thread, args.under, args.top, expected))


if __name__ == "__main__":
    main()
