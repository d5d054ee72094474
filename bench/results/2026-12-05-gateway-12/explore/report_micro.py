import json, time, timeit
from voxrt.protocol.session import Session
from voxrt.protocol.config import Limits
from voxrt.protocol.events import parse_client_message
from voxrt.audio import StreamEncoder
s = Session("s", Limits(), ["v"], "v", ["m"], "m", 0.0)
s.receive_text(json.dumps({"type":"session.start","output":{"codec":"opus","sample_rate":48000,"frame_ms":20}}), 0)
print(s.receive_text(json.dumps({"type":"text","context_id":"c1","text":"hello"}), 0))
msg = json.dumps({"type": "playback", "context_id": "c1", "played_ms": 1234.5})
N=100000
def t(f, name):
    best=min(timeit.repeat(f, number=N, repeat=5))/N*1e6
    print(f"{name}: {best:.2f} us")
t(lambda: s.receive_text(msg, 1.0), "session.receive_text")
t(lambda: parse_client_message(msg), "parse_client_message")
t(lambda: json.loads(msg), "json.loads")
t(lambda: '"playback"' in msg, "in")
enc = StreamEncoder("opus", 24000, 48000, 20)
import numpy as np
enc.split(np.zeros(1000, np.float32))
t(lambda: enc.held_ms, "held_ms")
from voxrt.protocol.clock import PlaybackClock
c = PlaybackClock(); c.on_audio_sent(20, 0.0)
t(lambda: c.on_report(10.0, 5.0), "clock.on_report")
from voxrt.gateway.admission import TokenBucket
tb = TokenBucket(50, 100)
t(lambda: tb.try_take(), "try_take")
from voxrt.gateway.context import now_ms
t(now_ms, "now_ms")
t(lambda: s.receive_report(msg, 1.0), "session.receive_report")
msg2 = '{"type":"playback","context_id":"c1","played_ms":1234.5}'
t(lambda: s.receive_report(msg2, 1.0), "session.receive_report compact")
