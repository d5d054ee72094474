#!/bin/bash
# usage: mktree.sh NAME : a copy of /work/main's working tree's python package (voxrt/ and models/) in /tmp/gw12/NAME
rm -rf /tmp/gw12/$1 && mkdir -p /tmp/gw12/$1 && cd /work/main && tar cf - --exclude=__pycache__ voxrt models pyproject.toml | (cd /tmp/gw12/$1 && tar xf -)
