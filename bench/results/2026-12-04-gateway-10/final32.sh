#!/bin/bash
# RUN_FRAMES 32 (new32) against base, 100-160 sessions: new32, base, base, new32
export GRID=100,120,140,160
/tmp/gw10/grid2.sh new32 rf32-run1
/tmp/gw10/grid2.sh base base32-run1
/tmp/gw10/grid2.sh base base32-run2
/tmp/gw10/grid2.sh new32 rf32-run2
