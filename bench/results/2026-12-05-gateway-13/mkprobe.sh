#!/bin/bash
# usage: mkprobe.sh SRC_TREE PROBE_TREE : a copy of SRC_TREE with the probe installed (stats files carry PROBE)
rm -rf /tmp/gw13/$2 && cp -a /tmp/gw13/$1 /tmp/gw13/$2 && cp /tmp/gw13/probe_src/gw11probe.py /tmp/gw13/$2/voxrt/gateway/
cd /tmp/gw13/$2 && python3 - <<'PY'
p='voxrt/gateway/stats.py'
s=open(p).read()
s=s.replace('''    def start(self) -> None:
''','''    def start(self) -> None:
        from voxrt.gateway import gw11probe
        gw11probe.install()
''')
s=s.replace('''"loop_lag": m.loop_lag.lag.to_dict()}''','''"loop_lag": m.loop_lag.lag.to_dict(), "probe": __import__("voxrt.gateway.gw11probe", fromlist=["x"]).PROBE}''')
open(p,'w').write(s)
PY
grep -n gw11probe voxrt/gateway/stats.py
