import gc, os, time, sys
if 'serve' in sys.argv or any('serve' in a for a in sys.argv):
    _acc = {0: [0, 0], 1: [0, 0], 2: [0, 0]}
    _t = [0]
    _path = f"/tmp/gw10/out/gc.{os.getpid()}.txt"
    _n = [0]
    def _cb(phase, info):
        if phase == "start":
            _t[0] = time.perf_counter_ns()
        else:
            g = info["generation"]; a = _acc[g]; a[0] += time.perf_counter_ns() - _t[0]; a[1] += 1
            _n[0] += 1
            if g >= 1:
                with open(_path + ".ev", "a") as f:
                    f.write(f"{time.monotonic():.3f} gen{g} {(time.perf_counter_ns() - _t[0])/1e6:.2f}ms collected={info['collected']}\n")
            if _n[0] % 50 == 0 or g == 2:
                with open(_path, "w") as f:
                    f.write(f"{time.monotonic()} {_acc} counts={gc.get_count()} thr={gc.get_threshold()}\n")
    gc.callbacks.append(_cb)
