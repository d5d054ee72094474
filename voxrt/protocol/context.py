"""One context (one agent turn) as the protocol session sees it. States are an enum; transitions are checked.

    OPEN --context.end--> ENDED --on_context_done--> DONE
      |                     |                         ^
      +------cancel---------+--> CANCELLING --on_context_cancelled
    OPEN --on_context_done (engine error)--> DONE

Context ids are never reused within a session, so a DONE context is kept (a few fields) to answer a late
`cancel` idempotently and to reject text for it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from voxrt.protocol.errors import InvalidTransition

MAX_CONTEXT_INDEX = 0xFFFF  # `index` is a u16 in the audio frame header; 0 is never used


class ContextState(enum.Enum):
    OPEN = "open"  # takes text
    ENDED = "ended"  # context.end received: no more text, audio still coming
    CANCELLING = "cancelling"  # cancel received: waiting for the I/O layer to confirm the stop
    DONE = "done"  # context.done sent


_ALLOWED = {
    ContextState.OPEN: {ContextState.ENDED, ContextState.CANCELLING, ContextState.DONE},
    ContextState.ENDED: {ContextState.CANCELLING, ContextState.DONE},
    ContextState.CANCELLING: {ContextState.DONE},
    ContextState.DONE: set(),
}

# States in which the I/O layer may still send the context's audio frames (protocol.md, `cancel`: "no audio
# frame of that context follows `cancelled`"; we stop earlier, as soon as the cancel arrives).
AUDIO_STATES = frozenset({ContextState.OPEN, ContextState.ENDED})


@dataclass
class Context:
    context_id: str
    index: int
    state: ContextState = ContextState.OPEN
    num_text_chars: int = 0  # text accepted so far, in code points (Limits.max_text_chars)
    num_cancels_pending: int = 0  # `cancel`s received and not yet answered by `cancelled`
    # the server ended it (an engine error, overload's `server_busy`) while the client could still send text:
    # its later text, in flight or from a token stream still running, is dropped without a reply
    # (Session._text: the client already has the error and context.done)
    ended_by_server: bool = False

    def transition(self, new: ContextState) -> None:
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(f"context {self.context_id!r}: expected a state that may move to {new.name}, "
                                    f"got {self.state.name}")
        self.state = new

    @property
    def is_done(self) -> bool:
        return self.state is ContextState.DONE

    @property
    def is_cancellable(self) -> bool:
        return self.state in (ContextState.OPEN, ContextState.ENDED)
