#!/bin/bash
# round 11's final grids: t2 (HEAD: uvloop default, the pacer fix, the report fast path) on --loop uvloop and
# --loop asyncio alternated; then t3 (t2 + the int16 prototype) on uvloop, twice
export GRID=10,20,30,40,50,60,70,80,100,110,120,130,140,150,160
/tmp/gw11/grid.sh t2 uvloop f-uv-run1
/tmp/gw11/grid.sh t2 asyncio f-as-run1
/tmp/gw11/grid.sh t3 uvloop f-i16-run1
/tmp/gw11/grid.sh t2 asyncio f-as-run2
/tmp/gw11/grid.sh t2 uvloop f-uv-run2
/tmp/gw11/grid.sh t3 uvloop f-i16-run2
