#!/bin/bash
# usage: mkprobe.sh SRC_TREE PROBE_TREE : a copy of SRC_TREE with the probe installed (stats files carry PROBE)
# (the probe: this folder's explore/gw12probe.py, installed as /tmp/gw12/probe_src/gw11probe.py)
rm -rf /tmp/gw12/$2 && cp -a /tmp/gw12/$1 /tmp/gw12/$2 && cp /tmp/gw12/probe_src/gw11probe.py /tmp/gw12/$2/voxrt/gateway/
cd /tmp/gw12/$2 && python3 - <<'PY'
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
