#!/bin/bash
# round 12's final grids, alternated: g-new (HEAD abbad97: int16 entry, two frames a write, the report's direct
# parse, the clock and header trims), g-base (da63cee: round 11's committed tree), g-i16 (9666d75: the int16 entry alone)
export GRID=10,20,30,40,50,60,70,80,100,110,120,130,140,150,160
/tmp/gw12/grid.sh g-new uvloop new-run1
/tmp/gw12/grid.sh g-base uvloop base-run1
/tmp/gw12/grid.sh g-i16 uvloop i16-run1
/tmp/gw12/grid.sh g-new uvloop new-run2
/tmp/gw12/grid.sh g-base uvloop base-run2
/tmp/gw12/grid.sh g-i16 uvloop i16-run2
