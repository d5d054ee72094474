"""Which asyncio event loop a gateway process (and the gateway benchmark's clients) runs: `--loop`.

- `uvloop`: libuv's loop (the `uvloop` package, a dependency where it has wheels: Linux and macOS). Its
  timers, callbacks, transports and poller are C, so the event loop's own work per frame (the pacer's wake-up,
  the frame's `transport.write`, reading a playback report) costs less than on the standard library's loop.
- `asyncio`: the standard library's loop (selector based).
- `auto` (the default): uvloop when it can be imported, else asyncio.

uvicorn is always handed the resolved name, never its own "auto" (which would also pick uvloop, silently), so
the loop a process runs is the one this module logged (`describe`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, Callable, Coroutine, TypeVar

log = logging.getLogger("voxrt.gateway.event_loop")

LOOPS = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


class LoopUnavailable(RuntimeError):
    """`--loop uvloop` where uvloop cannot be imported."""


def uvloop_version() -> str | None:
    """uvloop's version when it can be imported here, else None."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return None
    return getattr(uvloop, "__version__", "?")


def resolve_loop(choice: str = "auto") -> str:
    """"uvloop" or "asyncio" for `choice` (auto, uvloop or asyncio). LoopUnavailable for uvloop without it;
    ValueError for any other name."""
    if choice not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {choice!r}")
    if choice == "asyncio":
        return "asyncio"
    if uvloop_version() is not None:
        return "uvloop"
    if choice == "uvloop":
        raise LoopUnavailable("--loop uvloop: the uvloop package is not installed here (pip install uvloop; it has "
                              "wheels for Linux and macOS); --loop asyncio, or auto, runs the standard library's "
                              "event loop")
    return "asyncio"


def describe(resolved: str, choice: str = "auto") -> str:
    """One line for the log: the loop that runs, and why."""
    if resolved == "uvloop":
        return f"event loop: uvloop {uvloop_version()} (--loop {choice})"
    why = "; uvloop is not installed" if choice == "auto" else ""
    return f"event loop: asyncio, the standard library's (--loop {choice}{why})"


def loop_factory(resolved: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A new-loop function for a resolved name ("uvloop" or "asyncio")."""
    if resolved == "uvloop":
        import uvloop  # noqa: PLC0415

        return uvloop.new_event_loop
    if resolved == "asyncio":
        return asyncio.new_event_loop
    raise ValueError(f"not a resolved loop: {resolved!r}")


def run(coro: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """`asyncio.run(coro)` on the loop `choice` resolves to."""
    factory = loop_factory(resolve_loop(choice))
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    loop = factory()  # Python 3.10: asyncio.run's steps, on this loop
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
