"""Opening a session: the WebSocket handshake (auth), `session.start`, and the server's `session.started`.

A refused session fails here, with the server's code: `AuthenticationError` (close 4001), `ServerBusyError`
(close 4029), `VoxrtError` (e.g. `unknown_voice`, which leaves the connection open on the server's side, so
the client closes it), or `ConnectError` when no WebSocket could be opened at all.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from voxrt.client.errors import (CONNECTION_FAILED, UNAUTHORIZED, AuthenticationError, ConnectError, VoxrtError,
                                 closed_error)
from voxrt.client.events import ErrorEvent, SessionStarted, parse_server_message
from voxrt.client.session import Session
from voxrt.protocol.config import OutputFormat, Pacing

SUBPROTOCOL = "voxrt.v1"  # offered at the handshake; the server echoes it


class connect:  # noqa: N801 (used like a function: `async with connect(...)` or `await connect(...)`)
    """Open a session: the WebSocket, `session.start`, and the server's `session.started`.

    `voice`, `model`, `segmentation`: None leaves the server's default. `output`: the audio format (None: the
    server's default, Opus 48 kHz 20 ms). `pacing`: "realtime", "burst", or a `Pacing(mode, lead_ms)`.
    `api_key` goes in `Authorization: Bearer`; `token` (minted by `POST /v1/tokens`) in `?token=`.
    `keepalive` pings when the session is quiet, so the server's inactivity timeout never closes it.

    Raises `ConnectError` (refused, timed out), `AuthenticationError` (close 4001), `ServerBusyError`
    (close 4029), or `VoxrtError` with the server's code (e.g. `unknown_voice`).
    """

    def __init__(self, url: str, *, voice: str | None = None, model: str | None = None,
                 output: OutputFormat | None = None, pacing: str | Pacing | None = None,
                 segmentation: str | None = None, api_key: str | None = None, token: str | None = None,
                 open_timeout_s: float = 10.0, close_timeout_s: float = 10.0, keepalive: bool = True,
                 **websocket_options: Any) -> None:
        if isinstance(pacing, str):
            pacing = Pacing(mode=pacing)
        start: dict[str, Any] = {"type": "session.start"}
        for name, value in (("voice", voice), ("model", model), ("segmentation", segmentation)):
            if value is not None:
                start[name] = value
        if output is not None:
            start["output"] = output.to_wire()
        if pacing is not None:
            start["pacing"] = pacing.to_wire()
        self._start = start
        self._url = _with_token(url, token)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._open_timeout_s = open_timeout_s
        self._close_timeout_s = close_timeout_s
        self._keepalive = keepalive
        self._websocket_options = websocket_options
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, exc_type, exc, tb) -> None:
        assert self._session is not None
        await self._session.__aexit__(exc_type, exc, tb)

    async def _open(self) -> Session:
        try:
            ws = await ws_connect(self._url, additional_headers=self._headers, subprotocols=[SUBPROTOCOL],
                                  open_timeout=self._open_timeout_s, close_timeout=self._close_timeout_s,
                                  **self._websocket_options)
        except InvalidStatus as error:
            status = error.response.status_code
            kind = AuthenticationError if status in (401, 403) else ConnectError
            code = UNAUTHORIZED if kind is AuthenticationError else CONNECTION_FAILED
            raise kind(code, f"{self._safe_url} refused the WebSocket handshake: HTTP {status}", fatal=True) \
                from error
        except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI) as error:
            raise ConnectError(CONNECTION_FAILED, f"cannot connect to {self._safe_url}: {error}", fatal=True) \
                from error
        try:
            started = await asyncio.wait_for(self._start_session(ws), self._open_timeout_s)
        except BaseException as error:
            await ws.close()
            if isinstance(error, asyncio.TimeoutError):
                raise ConnectError(CONNECTION_FAILED, f"no session.started from {self._safe_url} within "
                                                      f"{self._open_timeout_s:g} s", fatal=True) from None
            raise
        return Session(ws, started, close_timeout_s=self._close_timeout_s, keepalive=self._keepalive)

    async def _start_session(self, ws: ClientConnection) -> SessionStarted:
        """session.start -> session.started, or the error the server answered with. A refused session (auth,
        capacity) gets a fatal `error` and a close: the close code is read before raising."""
        try:
            await ws.send(json.dumps(self._start))
        except ConnectionClosed:
            pass  # closed at once (auth, capacity): the error message before the close is still queued
        fatal: VoxrtError | None = None
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosed:
                raise closed_error(ws.close_code, ws.close_reason or "", fatal) from None
            if isinstance(message, bytes):
                continue
            event = parse_server_message(message)
            if isinstance(event, SessionStarted):
                return event
            if isinstance(event, ErrorEvent):
                if not event.is_fatal:  # unknown_voice, unknown_model, invalid_message: this start is refused
                    raise event.to_exception()
                fatal = event.to_exception()

    @property
    def _safe_url(self) -> str:
        """The URL without its query (a token must not end up in logs)."""
        parts = urlsplit(self._url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _with_token(url: str, token: str | None) -> str:
    if token is None:
        return url
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "token"] + [("token", token)]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))

