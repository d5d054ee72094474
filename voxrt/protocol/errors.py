"""Wire errors of the voxrt.v1 protocol: one exception type, the stable codes, and the WebSocket close codes.

Each error code is mapped to its wire shape here once (`fatal`, `close_code`); the session and the gateway
raise or build `ProtocolError`s and never spell a close code themselves. Messages are written for clients:
they name the field and the allowed values, and never hold internals (paths, stack traces).
"""

from __future__ import annotations

# ---- WebSocket close codes (RFC 6455 section 7.4; 4000-4999 are ours) --------------------------------------

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # RFC 6455 7.4.1: "an endpoint is going away, such as a server going down"
CLOSE_TOO_LARGE = 1009  # RFC 6455 7.4.1: "a message that is too big for it to process"
CLOSE_AUTH = 4001
CLOSE_INACTIVE = 4008  # mirrors HTTP 408 Request Timeout
CLOSE_CAPACITY = 4029  # mirrors HTTP 429 Too Many Requests
CLOSE_PROTOCOL = 4400  # mirrors HTTP 400 Bad Request

# ---- error codes -------------------------------------------------------------------------------------------

# Non-fatal: the session and its other contexts go on.
INVALID_JSON = "invalid_json"
INVALID_MESSAGE = "invalid_message"
UNKNOWN_TYPE = "unknown_type"
UNEXPECTED_BINARY = "unexpected_binary"
TEXT_TOO_LONG = "text_too_long"
CONTEXT_LIMIT = "context_limit"
UNKNOWN_VOICE = "unknown_voice"
UNKNOWN_MODEL = "unknown_model"
UNKNOWN_CONTEXT = "unknown_context"

# Fatal: the `error` message goes out, then the connection closes with the mapped code.
MESSAGE_TOO_LARGE = "message_too_large"
SESSION_NOT_STARTED = "session_not_started"
TOO_MANY_INVALID_MESSAGES = "too_many_invalid_messages"
INACTIVITY_TIMEOUT = "inactivity_timeout"
UNAUTHORIZED = "unauthorized"  # for the gateway: auth normally closes before any message, but may say why
SERVER_BUSY = "server_busy"  # for the gateway: server at capacity; sent with `retry_after_ms` before close 4029
# (a session refused at its start); also non-fatal for one context that the engine could not start in time
# (`--max-admission-wait-ms`), the session going on
SERVER_SHUTTING_DOWN = "server_shutting_down"  # for the gateway: drained on SIGTERM (gateway/drain.py), close 1001

FATAL_CLOSE_CODES: dict[str, int] = {
    MESSAGE_TOO_LARGE: CLOSE_TOO_LARGE,
    SESSION_NOT_STARTED: CLOSE_PROTOCOL,
    TOO_MANY_INVALID_MESSAGES: CLOSE_PROTOCOL,
    INACTIVITY_TIMEOUT: CLOSE_INACTIVE,
    UNAUTHORIZED: CLOSE_AUTH,
    SERVER_BUSY: CLOSE_CAPACITY,
    SERVER_SHUTTING_DOWN: CLOSE_GOING_AWAY,
}

# Garbage from the client: these count towards `Limits.max_invalid_messages` (protocol.md, "Errors and
# limits": "a client that keeps sending garbage may be closed 4400"). Errors about a well-formed request that
# cannot be served now (context_limit, unknown_context, ...) do not.
INVALID_INPUT_CODES = frozenset({INVALID_JSON, INVALID_MESSAGE, UNKNOWN_TYPE, UNEXPECTED_BINARY})


class ProtocolError(Exception):
    """An error to report to the client as a wire `error` message.

    `fatal` and `close_code` default from the code (FATAL_CLOSE_CODES): `ProtocolError("inactivity_timeout",
    "...")` is fatal with close 4008; an unlisted code is non-fatal unless given a close code.

    `field` names the offending field of the client's message (when one is to blame); `message_type` is the
    client message's `type` when it could be read. Both stay on this side of the wire. `garbage`: the error
    counts towards `Limits.max_invalid_messages` (default: its code is in INVALID_INPUT_CODES); False for a
    well-formed message that only came too late (text for a context that has ended).
    """

    def __init__(self, code: str, message: str, fatal: bool | None = None, close_code: int | None = None,
                 context_id: str | None = None, *, field: str | None = None, message_type: str | None = None,
                 garbage: bool | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.close_code = close_code if close_code is not None else FATAL_CLOSE_CODES.get(code)
        self.fatal = fatal if fatal is not None else self.close_code is not None
        if self.fatal and self.close_code is None:
            raise ValueError(f"fatal error {code!r} needs a close code")
        self.context_id = context_id
        self.field = field
        self.message_type = message_type
        self.garbage = code in INVALID_INPUT_CODES if garbage is None else garbage

    def __repr__(self) -> str:
        return (f"ProtocolError(code={self.code!r}, message={self.message!r}, fatal={self.fatal}, "
                f"close_code={self.close_code}, context_id={self.context_id!r})")


class InvalidTransition(AssertionError):
    """A state machine was asked for a move its table forbids: a bug in the caller, never a client error."""


def clip(text: str, max_chars: int = 64) -> str:
    """A client-supplied string shortened for echoing back inside an error message."""
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


MAX_CLOSE_REASON_BYTES = 123  # RFC 6455 5.5: a control frame's payload is at most 125 bytes, 2 of them the code


def close_reason(text: str) -> str:
    """`text` as a WebSocket close frame's reason: at most 123 bytes of UTF-8, cut on a character boundary, lone
    surrogates replaced. A longer reason makes the close itself fail (the peer sees a dropped connection, 1006,
    instead of the close code): a client's non-ASCII voice or call id in it did that."""
    data = text.encode("utf-8", "replace")[:MAX_CLOSE_REASON_BYTES]
    return data.decode("utf-8", "ignore")
