#!/bin/bash
# Recorded as run on 2026-12-01 (Zen 3 machine; paths of that session). Step 3 ran from a scratch
# worktree whose qbench/kernels/select.py choose() returned None for every int8 layer
# (INT8 conv/matmul on default schedules), committed nowhere. Output: demo.log beside this file.
# Issue 11 demo: qbench compare for efficientnet_lite0 on llvm, three cases.
set -u
cd /work/main && . .venv/bin/activate
D=/tmp/demo3
COMMON="--model efficientnet_lite0 --target llvm --data /work/shared/data/imagenet-sample --calib-size 32 --eval-size 100 --cache-dir $D/cal --tuning-db $D/tune"
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
newest() { ls -td $1/*/ | head -1; }
step "1. baseline run (idle machine)"
qbench run $COMMON --reports-dir $D/r1 > $D/r1.log 2>&1; echo "exit $?"
B=$(newest $D/r1); echo "report: $B"
qbench baseline save $B --store $D/store; echo "exit $?"
step "2. unchanged rerun with a second process loading the CPU"
python -c "while True: pass" & LOADER=$!
qbench run $COMMON --reports-dir $D/r2 > $D/r2.log 2>&1; echo "exit $?"
kill $LOADER
R2=$(newest $D/r2)
qbench compare $R2 --store $D/store --json $D/c2.json; echo "compare exit $?"
step "3. deliberately slowed INT8 build (INT8 layers on default schedules, in a scratch worktree)"
(cd /work/wt-slow && python -m qbench.cli run $COMMON --reports-dir $D/r3 > $D/r3.log 2>&1; echo "exit $?")
R3=$(newest $D/r3)
qbench compare $R3 --store $D/store --json $D/c3.json; echo "compare exit $?"
step "4. changed calibration mode (max)"
qbench run $COMMON --calib-mode max --reports-dir $D/r4 > $D/r4.log 2>&1; echo "exit $?"
R4=$(newest $D/r4)
qbench compare $R4 --store $D/store; echo "compare exit $?"
step "done"
