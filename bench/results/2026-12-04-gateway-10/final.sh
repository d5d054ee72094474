#!/bin/bash
# the final grids: new, base, base, new (each from its own tree: /tmp/gw10/{base,new})
export GRID=10,20,30,40,50,60,70,80,100,120,140,160
/tmp/gw10/grid2.sh new new-run1
/tmp/gw10/grid2.sh base base-run1
/tmp/gw10/grid2.sh base base-run2
/tmp/gw10/grid2.sh new new-run2
