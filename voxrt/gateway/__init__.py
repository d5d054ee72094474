"""The gateway: a Starlette app on uvicorn. The realtime protocol over WebSocket, HTTP endpoints, auth and
metrics, in front of one engine process reached through `EngineClient`. Never imports torch."""
