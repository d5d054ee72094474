"""The engine: scheduling (pure, `sched/`), execution on torch (`runtime/`), and the process plumbing
(`messages`, `client`, `process`) that the gateway talks to. Nothing here imports starlette."""
