"""The protocol session: one WebSocket connection's state machine, without I/O.

The gateway feeds it what arrives (`receive_text`, `receive_bytes`), what the engine did (`on_*`) and the
time (`poll`), and carries out the returned actions in order. Every method returns a list of actions and
none raises for anything a client sends: client mistakes become `error` messages (protocol.md, "Errors and
limits"). After CLOSED every method returns [].

    AWAITING_START --session.start--> ACTIVE --session.end--> ENDING --last context done--> CLOSED
    (any state) --fatal error or close()--> CLOSED
"""

from __future__ import annotations

import enum
from typing import Sequence

from voxrt.protocol.actions import (Action, AppendText, CancelContext, CloseConnection, EndContext, EndSession,
                                    FlushContext, OpenContext, ReportPlayback, SendText, StartSession)
from voxrt.protocol.config import (Limits, SessionConfig, output_from_wire, pacing_from_wire,
                                   segmentation_from_wire)
from voxrt.protocol.context import AUDIO_STATES, MAX_CONTEXT_INDEX, Context, ContextState
from voxrt.protocol.errors import (CLOSE_NORMAL, CONTEXT_LIMIT, INACTIVITY_TIMEOUT,
                                   INVALID_MESSAGE, MESSAGE_TOO_LARGE, SESSION_NOT_STARTED, TEXT_TOO_LONG,
                                   TOO_MANY_INVALID_MESSAGES, UNEXPECTED_BINARY, UNKNOWN_CONTEXT, UNKNOWN_MODEL,
                                   UNKNOWN_VOICE, InvalidTransition, ProtocolError, clip)
from voxrt.protocol.events import (CancelEvent, ClientEvent, ContextEndEvent, FlushEvent, PingEvent, PlaybackEvent,
                                   SessionEndEvent, SessionStartEvent, TextEvent, parse_client_message,
                                   parse_playback_report, protocol_error_event)
from voxrt.protocol.server_events import (Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          SessionStarted)


class SessionState(enum.Enum):
    AWAITING_START = "awaiting_start"  # connected; the first valid message must be session.start
    ACTIVE = "active"
    ENDING = "ending"  # session.end received: finishing the open contexts, then close 1000
    CLOSED = "closed"


_ALLOWED = {
    SessionState.AWAITING_START: {SessionState.ACTIVE, SessionState.CLOSED},
    SessionState.ACTIVE: {SessionState.ENDING, SessionState.CLOSED},
    SessionState.ENDING: {SessionState.CLOSED},
    SessionState.CLOSED: set(),
}

# While the server still owes a context's audio (ENDED) or its cancel answer (CANCELLING), a quiet client is
# listening, not gone: a long answer may play for longer than the inactivity timeout.
_SERVER_BUSY_STATES = frozenset({ContextState.ENDED, ContextState.CANCELLING})


def _utf8_size_exceeds(data: str, max_bytes: int) -> bool:
    # A code point is 1 to 4 UTF-8 bytes: most messages are decided without encoding them.
    if len(data) > max_bytes:
        return True
    if len(data) * 4 <= max_bytes:
        return False
    return len(data.encode("utf-8", "surrogatepass")) > max_bytes


def _listing(names: Sequence[str], max_names: int = 20) -> str:
    shown = ", ".join(names[:max_names])
    return shown + (f", ... ({len(names)} in all)" if len(names) > max_names else "")


class Session:
    def __init__(self, session_id: str, limits: Limits, voices: Sequence[str], default_voice: str,
                 models: Sequence[str], default_model: str, now_ms: float, pinned_lengths: bool = False) -> None:
        """`pinned_lengths`: honour `text`'s `num_frames` benchmark extension (`voxrt serve
        --allow-pinned-lengths`); else it is an unknown field, ignored unchecked."""
        if default_voice not in voices:
            raise ValueError(f"default_voice {default_voice!r} is not among the voices {list(voices)}")
        if default_model not in models:
            raise ValueError(f"default_model {default_model!r} is not among the models {list(models)}")
        self.session_id = session_id
        self.limits = limits
        self.voices = tuple(voices)
        self.default_voice = default_voice
        self.models = tuple(models)
        self.default_model = default_model
        self.pinned_lengths = pinned_lengths
        self.state = SessionState.AWAITING_START
        self.config: SessionConfig | None = None
        self._contexts: dict[str, Context] = {}  # every context of the session, DONE ones included
        # the ones not DONE, in opening order (pruned by `_live_contexts`): what the checks below walk, so that a
        # long session's every open, poll and cancel costs its live contexts, not every context it ever had
        self._live: dict[str, Context] = {}
        self._next_index = 1
        self._last_activity_ms = now_ms
        self._opened_ms = now_ms
        self._num_invalid_in_row = 0

    # ---- client input ----------------------------------------------------------------------------------------

    def receive_text(self, data: str, now_ms: float) -> list[Action]:
        if self.state is SessionState.CLOSED:
            return []
        self._last_activity_ms = now_ms
        if _utf8_size_exceeds(data, self.limits.max_message_bytes):
            return self._too_large()
        try:
            actions = self._dispatch(parse_client_message(data, self.pinned_lengths), now_ms)
        except ProtocolError as error:
            return self._reject(error)
        self._num_invalid_in_row = 0
        return actions

    def receive_report(self, data: str, now_ms: float) -> tuple[str, float] | None:
        """`receive_text` for the message most clients send most: a playback report in the shape they write it
        (`events.parse_playback_report`) about an open context of a started session. Then (context_id,
        played_ms), the fields of the one ReportPlayback `receive_text` would return, with the same state
        changes (the activity time; the run of invalid messages ends). None for anything else, with nothing
        changed: call `receive_text`, which answers it (its errors, or [] for a context that is done)."""
        state = self.state
        if (state is not SessionState.ACTIVE and state is not SessionState.ENDING) or \
                _utf8_size_exceeds(data, self.limits.max_message_bytes):
            return None
        report = parse_playback_report(data)
        if report is None:
            return None
        context = self._contexts.get(report[0])
        if context is None or context.is_done:
            return None
        self._last_activity_ms = now_ms
        self._num_invalid_in_row = 0
        return report

    def receive_bytes(self, data: bytes, now_ms: float) -> list[Action]:
        if self.state is SessionState.CLOSED:
            return []
        self._last_activity_ms = now_ms
        if len(data) > self.limits.max_message_bytes:
            return self._too_large()
        return self._reject(ProtocolError(UNEXPECTED_BINARY, "clients send no binary frames in voxrt.v1"))

    def poll(self, now_ms: float, is_sending_audio: bool = False, audio_at_ms: float | None = None) -> list[Action]:
        """Call now and then (the gateway's timer; `inactivity_deadline_ms` says when it matters).
        `is_sending_audio`: the I/O layer sent audio since the last poll. A client listening to audio is not
        inactive, whatever state its context is in (an open context speaks what it was sent so far).
        `audio_at_ms`: audio is still owed and was last sent then: active as of then (not as of now, so that
        owed audio that never comes cannot keep the session open without bound). A
        connection that has not started a session `limits.start_timeout_s` after it opened is closed (4008):
        an unstarted socket must not hold its place for the whole inactivity timeout."""
        if self.state is SessionState.CLOSED:
            return []
        if self.state is SessionState.AWAITING_START and now_ms >= self._opened_ms + self.limits.start_timeout_s * 1000:
            return self._fail(ProtocolError(INACTIVITY_TIMEOUT, f"no session.start within "
                                                                f"{self.limits.start_timeout_s:g} s"))
        if is_sending_audio or any(c.state in _SERVER_BUSY_STATES for c in self._live_contexts()):
            self._last_activity_ms = max(self._last_activity_ms, now_ms)
            return []
        if audio_at_ms is not None:
            self._last_activity_ms = max(self._last_activity_ms, audio_at_ms)
        if now_ms < self.inactivity_deadline_ms:
            return []
        return self._fail(ProtocolError(INACTIVITY_TIMEOUT, f"no message for {self.limits.inactivity_timeout_s:g} s"))

    # ---- what the engine did (called by the I/O layer) ---------------------------------------------------------

    def on_context_done(self, context_id: str, reason: str, audio_ms: float, metrics: dict) -> list[Action]:
        """The context's audio is all sent (reason "completed") or it failed ("error"). Ignored for a context
        that is DONE, unknown, or CANCELLING (a cancelled context ends through on_context_cancelled)."""
        context = self._contexts.get(context_id)
        if self.state is SessionState.CLOSED or context is None or context.state in (
                ContextState.DONE, ContextState.CANCELLING):
            return []
        message = SendText.of(ContextDone(context_id, reason, audio_ms, metrics))
        context.ended_by_server = context.state is ContextState.OPEN
        context.transition(ContextState.DONE)
        return [message, *self._close_if_ended()]

    def on_context_cancelled(self, context_id: str, played_ms: float, spoken_text: str, audio_ms: float,
                             metrics: dict) -> list[Action]:
        """The stop is confirmed: no more audio of this context will be sent. Answers every pending cancel,
        then sends context.done (reason "cancelled")."""
        context = self._contexts.get(context_id)
        if self.state is SessionState.CLOSED or context is None or context.is_done:
            return []
        cancelled = SendText.of(Cancelled(context_id, played_ms, spoken_text))
        done = SendText.of(ContextDone(context_id, "cancelled", audio_ms, metrics))
        actions: list[Action] = [cancelled] * context.num_cancels_pending
        context.num_cancels_pending = 0
        context.transition(ContextState.DONE)
        return [*actions, done, *self._close_if_ended()]

    def on_flushed(self, context_id: str) -> list[Action]:
        context = self._contexts.get(context_id)
        if self.state is SessionState.CLOSED or context is None or context.is_done:
            return []
        return [SendText.of(Flushed(context_id))]

    def on_context_error(self, context_id: str, code: str, message: str) -> list[Action]:
        """A non-fatal error about one context (e.g. the engine failed it). Changes no state: the I/O layer
        follows with on_context_done(reason="error") when the context is over."""
        if self.state is SessionState.CLOSED:
            return []
        return [SendText.of(Error(code, message, False, context_id))]

    def fail(self, code: str, message: str, close_code: int | None = None, **extra) -> list[Action]:
        """A fatal error the I/O layer decided on (e.g. `server_busy` with `retry_after_ms`, instead of
        sending session.started): the error message, then the close; state CLOSED."""
        if self.state is SessionState.CLOSED:
            return []
        return self._fail(ProtocolError(code, message, fatal=True, close_code=close_code), **extra)

    def close(self) -> None:
        """The connection is gone (either side closed it). Idempotent."""
        self.state = SessionState.CLOSED

    # ---- queries -------------------------------------------------------------------------------------------------

    def context_index(self, context_id: str) -> int:
        return self._contexts[context_id].index

    def context_state(self, context_id: str) -> ContextState | None:
        context = self._contexts.get(context_id)
        return None if context is None else context.state

    def is_audio_allowed(self, context_id: str) -> bool:
        """Whether the context's audio may still be sent (false from the moment a cancel arrives)."""
        context = self._contexts.get(context_id)
        return self.state is not SessionState.CLOSED and context is not None and context.state in AUDIO_STATES

    def open_context_ids(self) -> list[str]:
        """Contexts not DONE, in opening order: what to cancel and free when the connection goes away."""
        return [c.context_id for c in self._live_contexts()]

    @property
    def inactivity_deadline_ms(self) -> float:
        return self._last_activity_ms + self.limits.inactivity_timeout_s * 1000.0

    # ---- dispatch ------------------------------------------------------------------------------------------------

    def _dispatch(self, event: ClientEvent, now_ms: float) -> list[Action]:
        if self.state is SessionState.AWAITING_START:
            if isinstance(event, SessionStartEvent):
                return self._start(event)
            raise ProtocolError(SESSION_NOT_STARTED, f"the first message must be session.start, got {event.TYPE}")
        if isinstance(event, TextEvent):
            return self._text(event)
        if isinstance(event, FlushEvent):
            context = self._known(event.context_id)
            return [FlushContext(context.context_id)] if context.state in AUDIO_STATES else []
        if isinstance(event, ContextEndEvent):
            context = self._known(event.context_id)
            if context.state is not ContextState.OPEN:
                return []  # already ended, cancelled or done: context.end is idempotent
            context.transition(ContextState.ENDED)
            return [EndContext(context.context_id)]
        if isinstance(event, CancelEvent):
            return self._cancel(event, now_ms)
        if isinstance(event, PlaybackEvent):
            context = self._contexts.get(event.context_id)
            if context is None:
                raise ProtocolError(UNKNOWN_CONTEXT, f"no context {clip(event.context_id)!r}",
                                    context_id=event.context_id)
            if context.is_done:  # a report that crossed context.done in flight: nothing left to pace
                return []
            return [ReportPlayback(event.context_id, event.played_ms)]
        if isinstance(event, PingEvent):
            return [SendText.of(Pong(event.id, now_ms))]
        if isinstance(event, SessionEndEvent):
            return self._end()
        assert isinstance(event, SessionStartEvent), event
        raise ProtocolError(INVALID_MESSAGE, "session.start: the session has already started",
                            message_type=event.TYPE)

    def _start(self, event: SessionStartEvent) -> list[Action]:
        voice = self.default_voice if event.voice is None else event.voice
        if voice not in self.voices:
            raise ProtocolError(UNKNOWN_VOICE, f"unknown voice {clip(voice)!r}; available voices: "
                                               f"{_listing(self.voices)}", field="voice")
        model = self.default_model if event.model is None else event.model
        if model not in self.models:
            raise ProtocolError(UNKNOWN_MODEL, f"unknown model {clip(model)!r}; available models: "
                                               f"{_listing(self.models)}", field="model")
        config = SessionConfig(voice=voice, model=model, output=output_from_wire(event.output),
                               pacing=pacing_from_wire(event.pacing),
                               segmentation=segmentation_from_wire(event.segmentation))
        self._transition(SessionState.ACTIVE)
        self.config = config
        return [StartSession(config),
                SendText.of(SessionStarted(self.session_id, model, voice, config.output, self.limits))]

    def _text(self, event: TextEvent) -> list[Action]:
        context_id = event.context_id
        context = self._contexts.get(context_id)
        actions: list[Action] = []
        if context is None:
            self._check_can_open(context_id)
            self._check_text_fits(0, event.text, context_id)
            context = Context(context_id, self._next_index)
            self._next_index += 1
            self._contexts[context_id] = self._live[context_id] = context
            context.num_text_chars = len(event.text)
            actions += [OpenContext(context_id, context.index, event.num_frames, event.text),
                        SendText.of(ContextStarted(context_id, context.index))]
        elif context.ended_by_server:
            # an agent streaming tokens keeps sending until it reads the error: each would otherwise be an
            # `invalid_message`, and more than `max_invalid_messages` of them in a row would close the session
            return []
        elif context.state is not ContextState.OPEN:
            raise ProtocolError(INVALID_MESSAGE, f"text: context {clip(context_id)!r} has already ended "
                                                 f"({context.state.value}); context ids are not reused within a "
                                                 f"session", context_id=context_id, message_type=event.TYPE,
                                garbage=False)  # well-formed, late (e.g. tokens in flight after a cancel)
        else:
            self._check_text_fits(context.num_text_chars, event.text, context_id)
            if event.text:
                context.num_text_chars += len(event.text)
                actions.append(AppendText(context_id, event.text))
        if event.flush:
            actions.append(FlushContext(context_id))
        return actions

    def _check_can_open(self, context_id: str) -> None:
        if self.state is SessionState.ENDING:
            raise ProtocolError(INVALID_MESSAGE, "text: session.end was received; no new contexts",
                                context_id=context_id, message_type="text")
        num_active = len(self._live_contexts())
        if num_active >= self.limits.max_contexts:
            raise ProtocolError(CONTEXT_LIMIT, f"at most {self.limits.max_contexts} contexts may be open at once; "
                                               f"end or cancel one first", context_id=context_id)
        if self._next_index > MAX_CONTEXT_INDEX:
            raise ProtocolError(CONTEXT_LIMIT, f"this session has used all {MAX_CONTEXT_INDEX} context indexes; "
                                               f"start a new session", context_id=context_id)

    def _check_text_fits(self, num_chars: int, text: str, context_id: str) -> None:
        if num_chars + len(text) > self.limits.max_text_chars:
            raise ProtocolError(TEXT_TOO_LONG, f"a context holds at most {self.limits.max_text_chars} characters of "
                                               f"text; this text was dropped", context_id=context_id)

    def _cancel(self, event: CancelEvent, now_ms: float) -> list[Action]:
        """Every cancel is answered by one `cancelled`: at once for an unknown or done context (idempotent),
        else after the I/O layer confirms the stop (on_context_cancelled), so that no audio follows it. The
        position it reports is the one at `now_ms`, when the cancel arrived (`CancelContext.at_ms`)."""
        if event.is_all:
            targets = self._live_contexts()
            if not targets:  # nothing to stop: still answered, like any cancel
                return [SendText.of(Cancelled(event.context_id, 0, ""))]
        else:
            context = self._contexts.get(event.context_id)
            if context is None or context.is_done:
                return [SendText.of(Cancelled(event.context_id, 0, ""))]
            targets = [context]
        actions: list[Action] = []
        for context in targets:
            context.num_cancels_pending += 1
            if context.is_cancellable:
                context.transition(ContextState.CANCELLING)
                actions.append(CancelContext(context.context_id, now_ms))
        return actions

    def _end(self) -> list[Action]:
        if self.state is SessionState.ENDING:
            return []  # a repeated session.end changes nothing
        actions: list[Action] = []
        for context in self._live_contexts():
            if context.state is ContextState.OPEN:  # "finish open contexts": no more text for them
                context.transition(ContextState.ENDED)
                actions.append(EndContext(context.context_id))
        self._transition(SessionState.ENDING)
        return [*actions, EndSession(), *self._close_if_ended()]

    # ---- helpers -------------------------------------------------------------------------------------------------

    def _live_contexts(self) -> list[Context]:
        """The contexts not DONE, in opening order; those DONE since the last call leave `_live` here."""
        live = self._live
        for context_id in [cid for cid, context in live.items() if context.is_done]:
            del live[context_id]
        return list(live.values())

    def _known(self, context_id: str) -> Context:
        context = self._contexts.get(context_id)
        if context is None:
            raise ProtocolError(UNKNOWN_CONTEXT, f"no context {clip(context_id)!r}", context_id=context_id)
        return context

    def _close_if_ended(self) -> list[Action]:
        if self.state is not SessionState.ENDING or self._live_contexts():
            return []
        self._transition(SessionState.CLOSED)
        return [CloseConnection(CLOSE_NORMAL, "session ended")]

    def _reject(self, error: ProtocolError) -> list[Action]:
        """A client message that could not be served: a non-fatal error, unless it is fatal, the first message
        is not a session.start, or the client keeps sending garbage."""
        if error.fatal:
            return self._fail(error)
        if self.state is SessionState.AWAITING_START and error.message_type not in (None, SessionStartEvent.TYPE):
            # e.g. a malformed `text` first: still a first message that is not session.start.
            return self._fail(ProtocolError(SESSION_NOT_STARTED,
                                            f"the first message must be session.start, got {error.message_type}"))
        if not error.garbage:
            self._num_invalid_in_row = 0  # well-formed, just not servable now
            return [SendText.of(protocol_error_event(error))]
        self._num_invalid_in_row += 1
        if self._num_invalid_in_row > self.limits.max_invalid_messages:
            return self._fail(ProtocolError(TOO_MANY_INVALID_MESSAGES,
                                            f"more than {self.limits.max_invalid_messages} invalid messages in a row"))
        return [SendText.of(protocol_error_event(error))]

    def _too_large(self) -> list[Action]:
        return self._fail(ProtocolError(MESSAGE_TOO_LARGE, f"a message may hold at most "
                                                           f"{self.limits.max_message_bytes} bytes"))

    def _fail(self, error: ProtocolError, **extra) -> list[Action]:
        assert error.fatal and error.close_code is not None, error
        self._transition(SessionState.CLOSED)
        # The close reason is the stable code: RFC 6455 5.5 caps a close frame's payload at 125 bytes.
        return [SendText.of(protocol_error_event(error, **extra)), CloseConnection(error.close_code, error.code[:123])]

    def _transition(self, new: SessionState) -> None:
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(f"session {self.session_id!r}: expected a state that may move to {new.name}, "
                                    f"got {self.state.name}")
        self.state = new
