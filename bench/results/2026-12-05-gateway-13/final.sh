#!/bin/bash
# alternated: the same tree (c5a934c) with libopus fed the model's 24 kHz (auto) and the resampled 48 kHz (wire)
/tmp/gw13/grid.sh g-c5 auto auto-run1
/tmp/gw13/grid.sh g-c5 wire wire-run1
/tmp/gw13/grid.sh g-c5 auto auto-run2
/tmp/gw13/grid.sh g-c5 wire wire-run2
