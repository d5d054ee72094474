"""A background codec launch's delivery on the loop thread, stand-alone (16 chunks of 17 frames x 1920 samples):
CodecLaunch.results' row copies, EngineCore._chunk_event's tobytes, and EngineProcess._route's replace + conn.send of each
AudioChunk over a multiprocessing pipe to a reader process. Least/median/most of 20 rounds, ms.

    python bench/results/2026-12-03-host-fill/pipe_send.py
"""
import time, numpy as np, multiprocessing as mp, dataclasses
from voxrt.engine.messages import AudioChunk
def reader(conn):
    while True:
        m = conn.recv()
        if m is None: break
if __name__ == "__main__":
    a, b = mp.Pipe()
    p = mp.Process(target=reader, args=(b,)); p.start()
    host = np.random.rand(16, 17 * 1920).astype(np.float32)
    best = {}
    for rep in range(20):
        t0 = time.perf_counter()
        rows = [host[i, :17 * 1920].copy() for i in range(16)]
        t1 = time.perf_counter()
        evs = [AudioChunk(request_id=f"r{i}", chunk_index=3, pcm=r.astype("<f4").tobytes(), sample_rate=24000,
                          first_frame=0, num_frames=17, is_last=False, text_span=None, finish_reason=None) for i, r in enumerate(rows)]
        t2 = time.perf_counter()
        for e in evs:
            a.send(dataclasses.replace(e, done_ns=time.monotonic_ns()))
        t3 = time.perf_counter()
        for k, v in (("results copies", t1 - t0), ("chunk events", t2 - t1), ("replace+send 16", t3 - t2)):
            best.setdefault(k, []).append(v * 1e3)
        time.sleep(0.01)
    a.send(None); p.join()
    for k, v in best.items():
        print(k, "ms p50 %.2f min %.2f max %.2f" % (np.median(v), min(v), max(v)))
