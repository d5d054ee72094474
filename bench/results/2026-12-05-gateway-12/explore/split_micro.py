import numpy as np, timeit, soxr
from voxrt.audio.opus import clean_float
from voxrt.audio.pcm import float_to_int16
rng = np.random.default_rng(0)
x = (0.3*rng.standard_normal(96000)).astype(np.float32)   # a 2 s chunk at 48 kHz (100 frames)
def t(f, name, n=200):
    best = min(timeit.repeat(f, number=n, repeat=5))/n*1e6
    print(f"{name}: {best:.1f} us a chunk, {best/100:.2f} us a frame")
t(lambda: clean_float(x.copy(), in_place=True), "copy+clean_float")
t(lambda: x.copy(), "copy")
t(lambda: float_to_int16(x.copy(), in_place=True), "copy+float_to_int16 in place")
t(lambda: float_to_int16(x), "float_to_int16 (alloc)")
def f2(x):
    y = np.multiply(x, np.float32(32767.0), out=x)
    np.clip(y, -32767.0, 32767.0, out=y)
    if np.isnan(np.dot(y, y)): np.nan_to_num(y, copy=False)
    return np.rint(y, out=y).astype(np.int16)
t(lambda: f2(x.copy()), "copy+dot variant")
def f3(x):
    y = np.multiply(x, np.float32(32767.0), out=x)
    np.minimum(y, np.float32(32767.0), out=y); np.maximum(y, np.float32(-32767.0), out=y)
    if np.isnan(np.dot(y, y)): np.nan_to_num(y, copy=False)
    return np.rint(y, out=y).astype(np.int16)
t(lambda: f3(x.copy()), "copy+min/max+dot variant")
def f4(x):
    y = np.multiply(x, np.float32(32767.0), out=x)
    np.minimum(y, np.float32(32767.0), out=y); np.maximum(y, np.float32(-32767.0), out=y)
    if np.isnan(np.dot(y, y)): np.nan_to_num(y, copy=False)
    out = np.empty(y.shape, np.int16)
    np.rint(y, out=y); return y.astype(np.int16)
s = soxr.ResampleStream(24000, 48000, 1, dtype='float32', quality='HQ')
xin = x[:48000].copy()
t(lambda: s.resample_chunk(xin), "soxr resample 48000 in")
