"""The access log of HTTP requests: one `voxrt.access` line per request (voxrt/logs.py), written when the
response has been sent (a streamed response: when its last chunk has), with its id, status, size and duration.
WebSocket sessions write their own line when they close (gateway/realtime.py). Probes that succeed (`/healthz`,
`/readyz`, `/metrics` answering 200) log at debug, so a Kubernetes probe every few seconds does not bury the
requests; any other status logs at info like the rest."""

from __future__ import annotations

import logging
import time
import uuid

from voxrt.logs import access

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class AccessLogMiddleware:
    """A pure ASGI middleware (not Starlette's BaseHTTPMiddleware, which buffers streamed responses)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start_ns = time.monotonic_ns()
        request_id = _header(scope, b"x-request-id") or f"r-{uuid.uuid4().hex[:12]}"
        status, num_bytes = 500, 0  # an exception before the response starts is answered 500 by Starlette

        async def send_counted(message) -> None:
            nonlocal status, num_bytes
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                num_bytes += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            path = scope.get("path", "")
            client = scope.get("client")
            level = logging.DEBUG if path in PROBE_PATHS and status == 200 else logging.INFO
            access(f"http {scope.get('method', '?')} {path} {status}", level,
                   in_message=("kind", "method", "path", "status"), kind="http", id=request_id,
                   method=scope.get("method"), path=path, status=status, bytes=num_bytes,
                   duration_ms=round((time.monotonic_ns() - start_ns) / 1e6, 1),
                   client=f"{client[0]}:{client[1]}" if client else None)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            text = value.decode("latin-1")[:64]
            return text if text.isprintable() else None
    return None
