"""Logging for every `voxrt` command: one handler on stderr, text lines or JSON lines.

`setup_logging` is called once by the CLI (`--log-level`, `--log-json`) and exports its choice as
VOXRT_LOG_LEVEL / VOXRT_LOG_JSON, so the processes it spawns (the engine process, `--workers` gateways) log the
same way: they call `setup_child_logging`. uvicorn's own loggers are routed through the same handler
(make_server passes `log_config=None`), and its access log is replaced by `voxrt.access`, one line per HTTP
request and per WebSocket session with structured fields (`access`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from voxrt.settings import read_log_env

LEVELS = ("debug", "info", "warning", "error")
ACCESS_LOGGER = "voxrt.access"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO 8601, UTC), level, logger, process, msg, and any structured fields
    an `access` line carries (id, duration_ms, status, close_code, ...)."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        out = {"ts": ts, "level": record.levelname.lower(), "logger": record.name,
               "process": self.process or f"pid-{record.process}",
               "msg": getattr(record, "short_msg", None) or record.getMessage()}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _Handler(logging.StreamHandler):
    """Marks the handler this module installed, so a second setup replaces it instead of adding another."""


def setup_logging(level: str = "info", json_logs: bool = False, process: str | None = None,
                  export: bool = True) -> None:
    """Installs the one stderr handler on the root logger. `process`: a label for lines of a child process
    (e.g. `engine[1234]`). `export`: hand the choice to child processes through the environment."""
    level = level.lower()
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
    handler = _Handler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonFormatter(process))
    else:
        fmt = _TEXT_FORMAT if process is None else _TEXT_FORMAT.replace("%(levelname)s", f"{process} %(levelname)s")
        handler.setFormatter(logging.Formatter(fmt))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # through the root handler, not their own
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    if export:
        os.environ["VOXRT_LOG_LEVEL"] = level
        os.environ["VOXRT_LOG_JSON"] = "1" if json_logs else "0"


def setup_child_logging(process: str, default_level: int = logging.INFO) -> None:
    """In a spawned process: the parent's choice when it exported one (`setup_logging`), else text lines at
    `default_level` (library use, tests)."""
    env = read_log_env()
    if env.level is None:
        logging.basicConfig(level=default_level, format=_TEXT_FORMAT.replace("%(levelname)s",
                                                                             f"{process} %(levelname)s"))
        return
    setup_logging(env.level, env.json_logs, process=process, export=False)


def access(message: str, level: int = logging.INFO, in_message: tuple[str, ...] = (), **fields) -> None:
    """One access line: `message key=value ...` as text (less the fields `in_message` already shows), or
    every field as a JSON key."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.isEnabledFor(level):
        return
    fields = {k: v for k, v in fields.items() if v is not None}
    text = " ".join([message] + [f"{k}={_show(v)}" for k, v in fields.items() if k not in in_message])
    logger.log(level, "%s", text, extra={"fields": fields, "short_msg": message})


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text
