"""Round 11's probe with round 12's sections added (prepare, on_due, report_playback; not committed code): thread CPU
time spent in named sections of the gateway's event loop thread, and counts; written into the stats file (stats.py's
StatsWriter.write adds PROBE)."""
import threading, time

PROBE = {}
_tt = time.thread_time_ns


def _wrap(owner, name, key, main_only=True):
    orig = getattr(owner, name)
    main = threading.main_thread()
    entry = PROBE.setdefault(key, [0, 0])

    def wrapper(*args, **kwargs):
        if main_only and threading.current_thread() is not main:
            return orig(*args, **kwargs)
        t = _tt()
        try:
            return orig(*args, **kwargs)
        finally:
            entry[0] += 1
            entry[1] += _tt() - t
    setattr(owner, name, wrapper)


def install():
    from voxrt.gateway.pacer import Pacer
    from voxrt.gateway.audio_out import AudioOut
    from voxrt.gateway.wire import FrameWriter
    from voxrt.gateway.server import _WebSocketProtocol
    from voxrt.audio.encoder import StreamEncoder
    from voxrt.engine.client import EngineClient
    from voxrt.gateway.realtime import RealtimeSession
    _wrap(Pacer, "_tick", "tick")
    _wrap(AudioOut, "_encode_one", "loop_enc")
    _wrap(FrameWriter, "write_now", "write_now")
    _wrap(_WebSocketProtocol, "data_received", "recv")
    _wrap(RealtimeSession, "_receive_now", "receive_now")
    _wrap(StreamEncoder, "split", "split")
    _wrap(EngineClient, "set_playback_nowait", "fwd")
    _wrap(EngineClient, "_dispatch", "dispatch")
    from voxrt.gateway.context import ContextRunner
    _wrap(AudioOut, "prepare", "prepare")
    _wrap(AudioOut, "on_due", "on_due")
    _wrap(ContextRunner, "report_playback", "report_playback")
