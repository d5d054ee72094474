#!/bin/bash
# round 11's first grids: t1 (uvloop default and the pacer fix, before the report fast path) on --loop uvloop
# and --loop asyncio alternated, round 10's grid extended to 180 sessions
/tmp/gw11/grid.sh t1 uvloop uv-run1; /tmp/gw11/grid.sh t1 asyncio as-run1
/tmp/gw11/grid.sh t1 asyncio as-run2; /tmp/gw11/grid.sh t1 uvloop uv-run2
