"""Frame path alone: N realtime streams, pre-encoded frames, a no-op send_now, real loop + pacer."""
import asyncio, sys, time, os
import numpy as np
sys.path.insert(0, os.getcwd())
from voxrt.audio import StreamEncoder
from voxrt.gateway.audio_out import AudioOut
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.pacer import Pacer
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig

N = int(sys.argv[1]); SECONDS = float(sys.argv[2])
async def main():
    loop = asyncio.get_running_loop(); pacer = Pacer(loop); metrics = GatewayMetrics()
    cfg = SessionConfig("v", "m", OutputFormat("opus", 48000, 20), Pacing("realtime", 60))
    nbytes = [0]
    def send_now(frames):
        nbytes[0] += len(frames); return True
    async def send_bytes(d): pass
    async def stream(i):
        await asyncio.sleep(i * 0.02 / N)
        out = AudioOut(i, cfg, StreamEncoder("opus", 24000, 48000, 20), PlaybackClock(), metrics, send_bytes, 0.0,
                       pacer=pacer, send_now=send_now)
        pkt = b"\xfc" * 160
        while True:
            tr = [0]*9
            await out.play([pkt] * 100, False, time.monotonic_ns() / 1e6, tr)
    tasks = [asyncio.create_task(stream(i)) for i in range(N)]
    await asyncio.sleep(1.0)
    f0, c0 = nbytes[0], time.thread_time()
    await asyncio.sleep(SECONDS)
    f1, c1 = nbytes[0], time.thread_time()
    print(f"{os.path.basename(os.getcwd())}: {N} streams {(f1-f0)/SECONDS:.0f} frames/s  {1e6*(c1-c0)/(f1-f0):.1f} us/frame  wakeups {pacer.num_wakeups}")
    for t in tasks: t.cancel()
asyncio.run(main())
