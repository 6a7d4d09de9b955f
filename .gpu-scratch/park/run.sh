#!/bin/bash
# run on the GPU machine: build and run the park probe under the driver's checkpoint.
cd "$(dirname "$0")"; set -x
CK=/work/shared/probe/ckpt.c; [ -f ckpt.c ] && CK=ckpt.c
nvcc -o park park.c -lcuda 2>&1 | tail -3; nvcc -o ckpt $CK -lcuda 2>&1|tail -3
for cfg in "8 512" "8 2"; do
  set -- $cfg; rm -f ready; ./park $1 $2 ready > park.log 2>&1 & P=$!
  for i in $(seq 600); do [ -s ready ] && break; sleep 0.1; done
  pid=$(cat ready); cat park.log
  nvidia-smi --query-gpu=memory.used --format=csv
  ./ckpt lock $pid; ./ckpt checkpoint $pid
  nvidia-smi --query-gpu=memory.used --format=csv
  ./ckpt restore $pid; ./ckpt unlock $pid
  kill -USR1 $pid; wait $P; echo rc=$?; cat park.log | tail -5
done
