"""libopus alone (the floor's way) against the gateway's encode paths, same frames, one thread, us a frame."""
import ctypes, time, sys
import numpy as np, soxr
sys.path.insert(0, '/work/main')
from voxrt.engine.standin import speechlike_signal, SIGNAL_S, FRAME_RATE_HZ, SAMPLES_PER_FRAME, SAMPLE_RATE
from voxrt.audio.opus import OpusEncoder, clean_float
from voxrt.audio.pcm import float_to_int16
import opuslib.api.encoder as api

base = speechlike_signal(); num_offsets = int(SIGNAL_S * FRAME_RATE_HZ)
streams_f, streams_i = [], []
for k in range(25):
    start = (k * num_offsets // 25) * SAMPLES_PER_FRAME
    pcm = np.resize(np.roll(base, -start), 87 * SAMPLES_PER_FRAME)
    wire = clean_float(soxr.resample(pcm, SAMPLE_RATE, 48000, quality="HQ").astype(np.float32), in_place=True)
    streams_f.append([wire[i:i + 960] for i in range(0, len(wire) - 959, 960)])
    streams_i.append([float_to_int16(wire[i:i + 960]).tobytes() for i in range(0, len(wire) - 959, 960)])
N = sum(len(s) for s in streams_f)

def floor():
    for frames in streams_i:
        enc = OpusEncoder(48000, 20, signal="music")._encoder
        for f in frames:
            enc.encode(f, 960)

def ours():
    for frames in streams_f:
        enc = OpusEncoder(48000, 20, signal="music")
        for f in frames:
            enc.encode_clean(f)

fn = api.libopus_encode_float
def direct():
    pkt = ctypes.create_string_buffer(4000)
    P = ctypes.POINTER(ctypes.c_float)
    for frames in streams_f:
        enc = OpusEncoder(48000, 20, signal="music"); st = enc._encoder.encoder_state
        for f in frames:
            n = fn(st, f.ctypes.data_as(P), 960, pkt, 4000)
            ctypes.string_at(pkt, n)

def bare():
    for frames in streams_f:
        enc = OpusEncoder(48000, 20, signal="music"); st = enc._encoder.encoder_state
        ptrs = [f.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for f in frames]
        pkt = ctypes.create_string_buffer(4000)
        t = time.thread_time()
        for p in ptrs:
            fn(st, p, 960, pkt, 4000)
        bare.t += time.thread_time() - t
bare.t = 0.0

for name, f in [("floor (opuslib int16)", floor), ("ours (encode_clean)", ours), ("direct ptr", direct)]:
    best = 1e9
    for _ in range(3):
        t = time.thread_time(); f(); best = min(best, time.thread_time() - t)
    print(f"{name}: {best / N * 1e6:.1f} us a frame")
best = 1e9
for _ in range(3):
    bare.t = 0; bare(); best = min(best, bare.t)
print(f"bare ctypes calls, pointers prebuilt: {best / N * 1e6:.1f} us a frame")

fn16 = api.libopus_encode
def bare16():
    for frames in streams_i:
        enc = OpusEncoder(48000, 20, signal="music"); st = enc._encoder.encoder_state
        bufs = [ctypes.cast(ctypes.c_char_p(f), ctypes.POINTER(ctypes.c_int16)) for f in frames]
        pkt = ctypes.create_string_buffer(4000)
        t = time.thread_time()
        for p in bufs:
            fn16(st, p, 960, pkt, 4000)
        bare16.t += time.thread_time() - t
for fnx, nm in [(bare16, "bare int16 ctypes calls"), (bare, "bare float ctypes calls")]:
    best = 1e9
    for _ in range(3):
        fnx.t = 0; fnx(); best = min(best, fnx.t)
    print(f"{nm}: {best / N * 1e6:.1f} us a frame")
