"""libopus alone on the stand-in's signal (25 streams of 87 model frames, as voxrt.engine.standin.opus_floor_us),
fed 48 kHz (resampled, issue 21's floor) or the stand-in's own 24 kHz, at libopus's default bitrate for each and
at the 48 kHz one's; then how close each is to the model's audio once decoded at 48 kHz (SNR against the
resampled signal, best lag), and soxr's share of the gateway's split. Run: python explore/rate_micro.py"""
import timeit

import numpy as np
import soxr

from voxrt.audio import StreamEncoder
from voxrt.audio.opus import OpusDecoder, OpusEncoder, default_bitrate
from voxrt.engine.standin import SAMPLES_PER_FRAME, opus_floor_us, speechlike_signal

for rate, bitrate in [(48000, None), (24000, None), (24000, default_bitrate(48000, 20)), (48000, None),
                      (24000, default_bitrate(48000, 20))]:
    print(f"libopus alone at {rate} Hz, bitrate {bitrate or 'its default'}: "
          f"{opus_floor_us(signal='music', rate=rate, bitrate=bitrate):.1f} us a frame")

base = speechlike_signal()
pcm = np.resize(base, 200 * SAMPLES_PER_FRAME)
ref48 = soxr.resample(pcm, 24000, 48000, quality="HQ").astype(np.float32)
for rate, bitrate in [(48000, None), (24000, None), (24000, default_bitrate(48000, 20))]:
    enc, dec = OpusEncoder(rate, 20, signal="music", bitrate=bitrate), OpusDecoder(48000)
    src, spf = (ref48 if rate == 48000 else pcm), rate // 50
    packets = [enc.encode(src[i:i + spf]) for i in range(0, len(src) - spf + 1, spf)]
    out = np.concatenate([dec.decode(p, 960) for p in packets])
    best = max((10 * np.log10(np.sum(ref48[1000:n] ** 2) / np.sum((ref48[1000:n] - out[s:][1000:n]) ** 2)), s)
               for s in range(0, 800) for n in [min(len(out) - s, len(ref48)) - 2000])
    kbps = sum(map(len, packets)) * 8 / (len(packets) * 0.02) / 1000
    print(f"fed {rate} Hz at {bitrate or 'default'} b/s: {kbps:.1f} kb/s, SNR {best[0]:.2f} dB at lag {best[1]}")

chunk = (0.3 * np.random.default_rng(0).standard_normal(28800)).astype(np.float32)  # 1.2 s at 24 kHz: 60 frames
for opus_rate in ("wire", "auto"):
    enc = StreamEncoder("opus", 24000, 48000, 20, opus_signal="music", opus_rate=opus_rate)
    best = min(timeit.repeat(lambda: enc.split(chunk), number=50, repeat=5)) / 50 * 1e6
    print(f"split of a 1.2 s chunk, opus_rate={opus_rate}: {best:.0f} us ({best / 60:.2f} us a 20 ms frame)")
