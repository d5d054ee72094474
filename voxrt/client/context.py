"""One context (one agent turn) on the client side: text out, audio frames and events in.

The session's reader task pushes what the server sends for this context (`_on_*`); the caller sends text and
reads frames. Frames that arrive before anyone reads are buffered, without bound other than the context's
own audio, so nothing is lost. Client states (checked transitions, like the server's `ContextState`):

    NEW --send--> OPEN --end--> ENDED --context.done--> DONE
     |              |             |                      ^
     |              +--cancel-----+--> CANCELLING -------+      (`cancelled`, then context.done)
     +--end/cancel with no text sent: DONE at once (the server never heard of it)
    any state but DONE --error for this context, or the connection closed--> FAILED

A context error fails the context: its iterators and `done()` raise the `VoxrtError`, and the client cancels
the context on the server so that its resources return at once (the turn is broken: some text was dropped).
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
from collections import deque
from contextlib import aclosing
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import TYPE_CHECKING

from voxrt.client.errors import CONTEXT_FAILED, ClientStateError, VoxrtError
from voxrt.client.events import (Alignment, AudioFrame, Cancelled, ContextDone, ContextEvent, ContextStarted,
                                 Flushed)

if TYPE_CHECKING:
    from voxrt.client.session import Session


class ContextState(enum.Enum):
    NEW = "new"  # no text sent yet: the server does not know the context
    OPEN = "open"  # takes text
    ENDED = "ended"  # context.end sent: the rest is being spoken
    CANCELLING = "cancelling"  # cancel sent: waiting for `cancelled`; no frame is delivered any more
    DONE = "done"  # context.done received (or finished locally without ever reaching the server)
    FAILED = "failed"  # an error for this context, or the connection closed first


_ALLOWED = {
    ContextState.NEW: {ContextState.OPEN, ContextState.DONE, ContextState.FAILED},
    ContextState.OPEN: {ContextState.ENDED, ContextState.CANCELLING, ContextState.DONE, ContextState.FAILED},
    ContextState.ENDED: {ContextState.CANCELLING, ContextState.DONE, ContextState.FAILED},
    ContextState.CANCELLING: {ContextState.DONE, ContextState.FAILED},
    ContextState.DONE: set(),
    ContextState.FAILED: set(),
}
_FINISHED = frozenset({ContextState.DONE, ContextState.FAILED})
# JSON overhead of a `text` message around its text, generously: {"type":"text","context_id":...,"text":...}
_TEXT_MESSAGE_OVERHEAD_BYTES = 96


class Context:
    """Create through `Session.context()`. Not safe to share across threads (one event loop, like the
    session); any number of tasks may send while one task reads."""

    def __init__(self, session: Session, context_id: str, num_frames: int | None = None) -> None:
        self._session = session
        self.id = context_id
        self.num_frames = num_frames  # pinned output length asked for with the first text (benchmarks)
        self.state = ContextState.NEW
        self.started: ContextStarted | None = None  # the server's `context.started` (gives `index`)
        self.alignments: list[Alignment] = []  # every alignment received, in order
        self.num_flushed = 0  # `flushed` messages received
        self.num_text_chars = 0  # text sent so far, in code points (the server's max_text_chars counts these)
        self._items: deque[ContextEvent] = deque()  # received and not yet read: frames, alignments, flushed, done
        self._changed = asyncio.Event()  # set whenever _items, the state or the error changes
        self._finished = asyncio.Event()  # set on DONE or FAILED
        self._is_server_done = False  # the server holds nothing of it: context.done came, or it never opened
        self._is_reading = False
        self._error: VoxrtError | None = None
        self._result: ContextDone | None = None
        self._cancels: deque[asyncio.Future[Cancelled] | None] = deque()  # None: the client's own auto-cancel

    def __repr__(self) -> str:
        return f"Context(id={self.id!r}, state={self.state.name}, index={self.index})"

    @property
    def index(self) -> int | None:
        return None if self.started is None else self.started.index

    @property
    def is_finished(self) -> bool:
        return self.state in _FINISHED

    @property
    def error(self) -> VoxrtError | None:
        return self._error

    # ---- text out ------------------------------------------------------------------------------------------------

    async def send(self, text: str, *, flush: bool = False) -> None:
        """Append text (any fragment, e.g. one LLM token with its space); `flush=True` speaks everything
        sent so far without waiting for a sentence boundary. Text too large for one message is split."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self._expect_open("send text")
        if not text and (not flush or self.state is ContextState.NEW):
            return  # nothing to say (and nothing sent yet to flush)
        max_text_bytes = self._session.limits.max_message_bytes - _TEXT_MESSAGE_OVERHEAD_BYTES - len(self.id) * 6
        for i, part in enumerate(parts := _split_utf8(text, max_text_bytes)):
            message = {"type": "text", "context_id": self.id, "text": part}
            if flush and i == len(parts) - 1:
                message["flush"] = True
            if self.state is ContextState.NEW and self.num_frames is not None:
                message["num_frames"] = self.num_frames
            self._move(ContextState.OPEN)
            self.num_text_chars += len(part)
            await self._session._send(message)

    async def send_all(self, texts: AsyncIterable[str] | Iterable[str], *, end: bool = True) -> None:
        """Send every fragment of an (async) iterable, e.g. an LLM's token stream, then `end()`."""
        if isinstance(texts, AsyncIterable):
            async for text in texts:
                await self.send(text)
        else:
            for text in texts:
                await self.send(text)
        if end:
            await self.end()

    async def flush(self) -> None:
        """Speak all text sent so far without waiting for a boundary (`flushed` follows; see `num_flushed`)."""
        if self.state is ContextState.OPEN:
            await self._session._send({"type": "flush", "context_id": self.id})
        elif self.state is ContextState.FAILED:
            raise self._error  # type: ignore[misc]

    async def end(self) -> None:
        """No more text: the rest is spoken, the last frame carries is_last, then `context.done`. Idempotent.
        A context that never sent text is done at once (reason completed, no audio)."""
        if self.state is ContextState.NEW:
            self._finish(ContextDone(self.id, "completed", 0, {}))
        elif self.state is ContextState.OPEN:
            self._move(ContextState.ENDED)
            await self._session._send({"type": "context.end", "context_id": self.id})

    async def playback(self, played_ms: float) -> None:
        """Report how much of this context's audio has been played (ms from its first sample); the server's
        pacing and the engine's deadlines follow it. A report for a finished context is dropped."""
        if isinstance(played_ms, bool) or not isinstance(played_ms, (int, float)) or not math.isfinite(played_ms) \
                or played_ms < 0:
            raise ValueError(f"played_ms must be a finite number >= 0, got {played_ms!r}")
        if self.state in (ContextState.OPEN, ContextState.ENDED):
            await self._session._send({"type": "playback", "context_id": self.id, "played_ms": played_ms})

    async def cancel(self) -> Cancelled:
        """Barge-in: stop at once. Frames not yet read are discarded (their audio is unwanted now) and the
        iterators end; returns the server's `Cancelled` (played_ms, spoken_text). Idempotent: a finished
        context answers `Cancelled(played_ms=0, spoken_text="")` as the server would."""
        if self.state is ContextState.NEW or self.is_finished:
            if self.state is ContextState.NEW:
                self._finish(ContextDone(self.id, "cancelled", 0, {}))
            return Cancelled(self.id, 0, "")
        if self.state is not ContextState.CANCELLING:
            self._move(ContextState.CANCELLING)
        self._items.clear()
        self._changed.set()
        answer: asyncio.Future[Cancelled] = asyncio.get_running_loop().create_future()
        self._cancels.append(answer)
        try:
            await self._session._send({"type": "cancel", "context_id": self.id})
        except VoxrtError:
            _discard(answer, self._cancels)
            raise
        return await answer

    # ---- audio and events in -------------------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[ContextEvent]:
        """Everything the server sends for this context, in order: AudioFrame, Alignment, Flushed, and last the
        ContextDone. Ends early after `cancel()`; raises the context's error after the items before it. One
        reader at a time."""
        if self._is_reading:
            raise ClientStateError(f"context {self.id!r}: expected one reader, got a second concurrent one")
        self._is_reading = True
        try:
            while True:
                while self._items:
                    item = self._items.popleft()
                    yield item
                    if isinstance(item, ContextDone):
                        return
                if self._error is not None:
                    raise self._error
                if self.state in (ContextState.CANCELLING, ContextState.DONE):
                    return
                self._changed.clear()
                await self._changed.wait()
        finally:
            self._is_reading = False

    async def frames(self) -> AsyncIterator[AudioFrame]:
        """The context's audio frames in seq order; ends after the frame with is_last (or on cancel)."""
        async with aclosing(self.events()) as events:
            async for item in events:
                if isinstance(item, AudioFrame):
                    yield item
                    if item.is_last:
                        return

    async def audio(self) -> bytes:
        """All of the context's audio payloads, joined (for PCM codecs, the whole waveform)."""
        return b"".join([frame.payload async for frame in self.frames()])

    async def done(self) -> ContextDone:
        """Wait for `context.done` (frames need not be read first); raises the context's error."""
        await self._finished.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    # ---- from the session's reader -------------------------------------------------------------------------------

    def _on_started(self, event: ContextStarted) -> None:
        self.started = event

    def _on_item(self, item: AudioFrame | Alignment | Flushed) -> None:
        if isinstance(item, Alignment):
            self.alignments.append(item)
        elif isinstance(item, Flushed):
            self.num_flushed += 1
        if self.state in (ContextState.OPEN, ContextState.ENDED):  # nothing after a cancel or an error
            self._items.append(item)
            self._changed.set()

    def _on_cancelled(self, event: Cancelled) -> None:
        if self._cancels:
            answer = self._cancels.popleft()
            if answer is not None and not answer.done():
                answer.set_result(event)

    def _on_done(self, event: ContextDone) -> None:
        self._is_server_done = True
        if self.is_finished:
            return
        if event.reason == "error":  # an `error` message normally came first and failed the context already
            self._fail(VoxrtError(CONTEXT_FAILED, "the server ended the context with an error", context_id=self.id))
            return
        if self.state is not ContextState.CANCELLING:
            self._items.append(event)
        self._finish(event)

    def _on_error(self, error: VoxrtError) -> bool:
        """A non-fatal error for this context. True when the server may still hold the context open, so the
        session should cancel it there (it opened the context unless the error is about the first text)."""
        if self.started is None:
            self._is_server_done = True
        needs_cancel = self.state in (ContextState.OPEN, ContextState.ENDED) and not self._is_server_done
        self._fail(error)
        if needs_cancel:
            self._cancels.append(None)
        return needs_cancel

    def _on_closed(self, error: VoxrtError) -> None:
        self._fail(error)
        for answer in self._cancels:
            if answer is not None and not answer.done():
                answer.set_exception(error)
        self._cancels.clear()

    @property
    def _is_forgettable(self) -> bool:
        """Nothing more can come from the server for it: the session may stop routing to it."""
        return self.is_finished and not self._cancels and (self._is_server_done or self.started is None)

    # ---- helpers -------------------------------------------------------------------------------------------------

    def _expect_open(self, action: str) -> None:
        if self.state is ContextState.FAILED:
            raise self._error  # type: ignore[misc]
        if self.state not in (ContextState.NEW, ContextState.OPEN):
            raise ClientStateError(f"context {self.id!r}: cannot {action}: expected state NEW or OPEN, got "
                                   f"{self.state.name}")

    def _move(self, new: ContextState) -> None:
        if new is self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise ClientStateError(f"context {self.id!r}: expected a state that may move to {new.name}, got "
                                   f"{self.state.name}")
        self.state = new
        self._changed.set()

    def _finish(self, result: ContextDone) -> None:
        self._result = result
        self._move(ContextState.DONE)
        self._finished.set()

    def _fail(self, error: VoxrtError) -> None:
        if self.is_finished:
            return
        self._error = error
        self._items = deque(i for i in self._items if not isinstance(i, ContextDone))
        self._move(ContextState.FAILED)
        self._finished.set()


def _discard(answer: asyncio.Future, pending: deque) -> None:
    """Drop a future whose request never went out; if the close already failed it, mark that retrieved (the
    caller sees the send's error instead), so asyncio does not warn about an unretrieved exception."""
    if answer in pending:
        pending.remove(answer)
    if answer.done() and not answer.cancelled():
        answer.exception()


def _split_utf8(text: str, max_bytes: int) -> list[str]:
    """`text` in pieces whose JSON-escaped UTF-8 size stays within max_bytes (a message over the server's
    max_message_bytes is fatal: close 1009). Splits by halves; never inside a code point."""
    if len(json.dumps(text, ensure_ascii=False).encode()) <= max_bytes or len(text) <= 1:
        return [text]
    middle = len(text) // 2
    return _split_utf8(text[:middle], max_bytes) + _split_utf8(text[middle:], max_bytes)
