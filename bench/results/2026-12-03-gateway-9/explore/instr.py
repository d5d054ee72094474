import time, functools, threading
ACC = {}
_tt = time.thread_time_ns
def wrap(cls, name, key=None):
    key = key or f"{cls.__name__}.{name}"
    fn = getattr(cls, name)
    acc = ACC.setdefault(key, [0, 0])
    @functools.wraps(fn)
    def w(*a, **k):
        t = _tt()
        try:
            return fn(*a, **k)
        finally:
            acc[0] += _tt() - t; acc[1] += 1
    setattr(cls, name, w)
def wrap_async(cls, name, key=None):
    # time only the synchronous steps is hard; skip
    pass
def install():
    from voxrt.gateway.pacer import Pacer
    from voxrt.gateway.audio_out import AudioOut
    from voxrt.gateway.context import ContextRunner
    from voxrt.protocol.session import Session
    from voxrt.audio.encoder import StreamEncoder
    from voxrt.gateway.stats import StatsWriter
    wrap(Pacer, "_tick")
    wrap(AudioOut, "on_due")
    wrap(AudioOut, "prepare")
    wrap(AudioOut, "_next_ready")
    wrap(StreamEncoder, "split")
    wrap(StreamEncoder, "split_finish")
    wrap(Session, "receive_text")
    wrap(ContextRunner, "report_playback")
    wrap(StatsWriter, "write")
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol as P
        wrap(P, "data_received", "ws.data_received")
    except Exception as e:
        print("no uvicorn", e)
    from voxrt.engine import client as ec
    for n in dir(ec):
        pass
