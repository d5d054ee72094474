"""voxrt/logs.py and the CLI's logging options: --log-level and --log-json on every subcommand, --version,
text and JSON lines, the level handed to child processes."""

from __future__ import annotations

import json
import logging

import pytest

from voxrt import __version__
from voxrt.cli import build_parser, main
from voxrt.logs import JsonFormatter, access, setup_child_logging, setup_logging

COMMANDS = ["models", "bench", "serve", "make-checkpoint", "loadgen", "profile-split"]
REQUIRED = {"make-checkpoint": ["--arch", "x", "dir"], "loadgen": ["--workload", "w", "--out", "o"]}


@pytest.fixture(autouse=True)
def restore_logging(monkeypatch):
    monkeypatch.delenv("VOXRT_LOG_LEVEL", raising=False)
    monkeypatch.delenv("VOXRT_LOG_JSON", raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_takes_the_log_options(command):
    parser = build_parser()
    args = parser.parse_args([command, *REQUIRED.get(command, []), "--log-level", "warning", "--log-json"])
    assert args.log_level == "warning" and args.log_json is True
    args = parser.parse_args(["--log-level", "debug", command, *REQUIRED.get(command, [])])  # before it, too
    assert args.log_level == "debug"
    assert parser.parse_args([command, *REQUIRED.get(command, []), "-v"]).verbose is True
    with pytest.raises(SystemExit):
        parser.parse_args([command, *REQUIRED.get(command, []), "--log-level", "loud"])


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"voxrt {__version__} (voxrt-gateway)"


def test_json_lines_carry_access_fields(capsys, monkeypatch):
    setup_logging("info", json_logs=True)
    access("http GET /v1/models 200", in_message=("status",), kind="http", id="r-1", status=200, duration_ms=1.5,
           client=None)
    logging.getLogger("voxrt.test").debug("hidden below info")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["level"] == "info" and line["logger"] == "voxrt.access" and line["msg"] == "http GET /v1/models 200"
    assert line["id"] == "r-1" and line["status"] == 200 and line["duration_ms"] == 1.5 and "client" not in line
    assert line["ts"].endswith("Z")
    import os  # noqa: PLC0415

    assert os.environ["VOXRT_LOG_LEVEL"] == "info" and os.environ["VOXRT_LOG_JSON"] == "1"  # for child processes


def test_text_lines_and_one_handler(capsys):
    setup_logging("debug")
    setup_logging("info")  # a second setup replaces the handler, never doubles lines
    access("ws /v1/realtime closed", in_message=("kind",), kind="ws", id="s-1", frames=3, close_code=1000)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].endswith("INFO voxrt.access: ws /v1/realtime closed id=s-1 frames=3 close_code=1000")


def test_child_process_follows_the_parent(capsys, monkeypatch):
    monkeypatch.setenv("VOXRT_LOG_LEVEL", "warning")
    monkeypatch.setenv("VOXRT_LOG_JSON", "1")
    setup_child_logging("engine[7]")
    logging.getLogger("voxrt.engine").info("not shown")
    logging.getLogger("voxrt.engine").warning("shown")
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["process"] == "engine[7]" and json.loads(line)["msg"] == "shown"


def test_exceptions_stay_in_one_json_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("voxrt", logging.ERROR, __file__, 1, "failed", None, __import__("sys").exc_info())
    line = JsonFormatter("gateway").format(record)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exc"]
