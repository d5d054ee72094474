"""Typed engine errors. Each carries a stable `code` that the gateway maps to a wire error once.

No torch here: the gateway imports this module.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class. `code` is stable and safe to show to clients; the message never holds internals."""

    code = "engine_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self):  # picklable across the engine process boundary, subclasses included
        return (self.__class__, (self.message,))


class UnknownModelError(EngineError):
    code = "unknown_model"


class UnknownVoiceError(EngineError):
    code = "unknown_voice"


class InvalidParamsError(EngineError):
    code = "invalid_params"


class UnknownRequestError(EngineError):
    code = "unknown_request"


class CheckpointError(EngineError):
    """Model weights or files are missing or malformed; the message names what and how to get it."""

    code = "checkpoint_error"


class CapacityError(EngineError):
    """The KV cache or the request slots cannot hold this request (now or ever)."""

    code = "capacity"


class ServerBusyError(EngineError):
    """The engine refused a stream it could not start within `max_admission_wait_ms` (overload): retry later or
    elsewhere. The wire's `server_busy`."""

    code = "server_busy"


class RequestFailedError(EngineError):
    """A step that involved the request raised; the engine itself keeps serving."""

    code = "request_failed"


class EngineDeadError(EngineError):
    """The engine process exited or never became ready."""

    code = "engine_unavailable"


_BY_CODE = {cls.code: cls for cls in (UnknownModelError, CheckpointError, UnknownVoiceError, InvalidParamsError, UnknownRequestError,
                                      CapacityError, ServerBusyError, RequestFailedError, EngineDeadError)}


def error_from_code(code: str, message: str) -> EngineError:
    """Rebuilds a typed error from a code that crossed the process boundary; unknown codes keep the code."""
    error = _BY_CODE.get(code, EngineError)(message)
    error.code = code
    return error
