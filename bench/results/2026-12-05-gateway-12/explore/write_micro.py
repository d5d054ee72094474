import timeit, struct
from voxrt.gateway import wire
msgs = [b"x"*170, b"y"*165]
def old(): return b"".join([wire.binary_frame(m) for m in msgs])
H16=wire._HEAD_16; F=wire._FIN_BINARY; HS=wire._HEAD_SHORT; H64=wire._HEAD_64
def new():
    parts = []
    for data in msgs:
        length = len(data)
        parts.append(HS.pack(F, length) if length < 126 else H16.pack(F, 126, length) if length < 65536 else H64.pack(F, 127, length))
        parts.append(data)
    return b"".join(parts)
assert old()==new()
for f in (old,new): print(min(timeit.repeat(f, number=200000, repeat=5))/200000*1e6)
