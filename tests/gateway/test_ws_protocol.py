"""The gateway's uvicorn WebSocket protocol pauses reads only once a session has a backlog of received
messages (gateway/server.py, `_WebSocketProtocol`), and resumes them when the session has read them all."""

from __future__ import annotations

import asyncio
import logging

from voxrt.gateway import wire
from voxrt.gateway.server import MAX_QUEUED_MESSAGES, _WebSocketProtocol


class _Transport:
    def __init__(self) -> None:
        self.num_pauses = self.num_resumes = 0

    def pause_reading(self) -> None:
        self.num_pauses += 1

    def resume_reading(self) -> None:
        self.num_resumes += 1


def _protocol() -> _WebSocketProtocol:
    protocol = _WebSocketProtocol.__new__(_WebSocketProtocol)  # only what the receive path reads
    protocol.queue = asyncio.Queue()
    protocol.read_paused, protocol.close_sent = False, False
    protocol.frames, protocol.curr_msg_data_type = [], "text"
    protocol.transport = _Transport()
    protocol.logger = logging.getLogger("test")
    return protocol


def _receive(protocol, text: str) -> None:
    protocol.curr_msg_data_type, protocol.frames = "text", [text.encode()]
    protocol.send_receive_event_to_app()


def test_reads_pause_only_with_a_backlog_and_resume_once_it_is_read():
    async def main():
        protocol = _protocol()
        for i in range(MAX_QUEUED_MESSAGES - 1):
            _receive(protocol, f"m{i}")
        assert protocol.transport.num_pauses == 0 and not protocol.read_paused
        _receive(protocol, "last")
        assert protocol.transport.num_pauses == 1 and protocol.read_paused
        _receive(protocol, "more")  # already paused: not paused twice
        texts = [(await protocol.receive())["text"] for _ in range(MAX_QUEUED_MESSAGES + 1)]
        assert texts == [f"m{i}" for i in range(MAX_QUEUED_MESSAGES - 1)] + ["last", "more"]
        assert protocol.transport.num_resumes == 1 and not protocol.read_paused
        _receive(protocol, "after")  # one waiting message: no pause
        assert protocol.transport.num_pauses == 1
    asyncio.run(main())


def test_the_frame_writer_recognises_the_subclass():
    protocol = _protocol()
    assert wire._direct_protocol(protocol.send) is None  # the attributes a direct write needs are missing here
    for name in wire._PROTOCOL_ATTRIBUTES:
        setattr(protocol, name, None)
    assert wire._direct_protocol(protocol.send) is protocol
