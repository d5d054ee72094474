#!/bin/bash
# mktree.sh NAME [stub]: a copy of the working tree's voxrt (+ models, web) at /tmp/gw7/NAME
set -e
rm -rf /tmp/gw7/$1; mkdir -p /tmp/gw7/$1
cd /work/main && tar -c --exclude=__pycache__ voxrt models web | tar -x -C /tmp/gw7/$1
if [ "$2" = stub ]; then
python3 - /tmp/gw7/$1/voxrt/audio/opus.py <<'PY'
import sys
p=sys.argv[1]; s=open(p).read()
s=s.replace("    def _encode_input(self) -> bytes:\n", "    def _encode_input(self) -> bytes:\n        return b'\\xfc' * 150\n",1)
open(p,'w').write(s)
PY
fi
