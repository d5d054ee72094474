"""Errors of the voxrt client: one base type that carries the protocol's code, and subclasses by meaning.

Every failure the server reports arrives as an `error` message with a stable `code` (protocol.md, "Errors and
limits"); the client raises it as a `VoxrtError` with that code, so callers branch on `error.code` (or catch a
subclass) rather than on message text. Failures the client sees itself (the connection could not be made, or
closed under a waiting call) get the client-side codes below; they never collide with the wire's codes.

    VoxrtError                      code, message, fatal, context_id, close_code
      AuthenticationError           unauthorized (close 4001, or HTTP 401/403 at the handshake)
      ServerBusyError               server_busy (close 4029); retry_after_ms
      ConnectError                  connection_failed: refused, timed out, not a WebSocket endpoint
      ConnectionClosedError         connection_closed: the connection ended under a pending call

Misuse of the API (text after `end()`, two readers of one context) raises `ClientStateError`, a
`RuntimeError`: it is a bug in the caller, not something the server said.
"""

from __future__ import annotations

from voxrt.protocol.errors import CLOSE_AUTH, CLOSE_CAPACITY, SERVER_BUSY, UNAUTHORIZED

# Client-side codes (not sent by servers).
CONNECTION_FAILED = "connection_failed"
CONNECTION_CLOSED = "connection_closed"
INVALID_SERVER_MESSAGE = "invalid_server_message"  # the server broke the protocol (a bug there)
CONTEXT_FAILED = "context_failed"  # context.done with reason "error" and no `error` message before it


class VoxrtError(Exception):
    """An error with the protocol's `code`. `fatal`: the session is over. `context_id`: the one context it
    concerns (None for the session). `close_code`: the WebSocket close code when the connection closed."""

    def __init__(self, code: str, message: str, *, fatal: bool = False, context_id: str | None = None,
                 close_code: int | None = None, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.fatal = fatal
        self.context_id = context_id
        self.close_code = close_code
        self.retry_after_ms = retry_after_ms

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, fatal={self.fatal}, "
                f"context_id={self.context_id!r}, close_code={self.close_code})")


class AuthenticationError(VoxrtError):
    """The server refused the API key or token (close 4001)."""


class ServerBusyError(VoxrtError):
    """The server is at capacity (close 4029); try again after `retry_after_ms`."""


class ConnectError(VoxrtError):
    """The WebSocket could not be opened (refused, timed out, wrong URL). The cause is `__cause__`."""


class ConnectionClosedError(VoxrtError):
    """The connection closed while a call waited on it; `close_code` and `message` say how."""


class ClientStateError(RuntimeError):
    """The API was used out of order, e.g. `send` after `end`. Names the expected and the actual state."""


_BY_CODE: dict[str, type[VoxrtError]] = {UNAUTHORIZED: AuthenticationError, SERVER_BUSY: ServerBusyError}
_BY_CLOSE_CODE: dict[int, type[VoxrtError]] = {CLOSE_AUTH: AuthenticationError, CLOSE_CAPACITY: ServerBusyError}


def error_type(code: str) -> type[VoxrtError]:
    """The exception class for a wire error code."""
    return _BY_CODE.get(code, VoxrtError)


def closed_error(close_code: int | None, reason: str, cause: VoxrtError | None = None) -> VoxrtError:
    """The error for a connection that closed: the fatal `error` that preceded the close when there was one
    (now with the close code), else one built from the close code and reason."""
    if cause is not None:
        cause.close_code = close_code
        return cause
    kind = _BY_CLOSE_CODE.get(close_code or 0, ConnectionClosedError)
    code = {AuthenticationError: UNAUTHORIZED, ServerBusyError: SERVER_BUSY}.get(kind, CONNECTION_CLOSED)
    detail = f"connection closed (code {close_code})" + (f": {reason}" if reason else "")
    return kind(code, detail, fatal=True, close_code=close_code)
