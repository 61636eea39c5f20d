#!/usr/bin/env bash
# recorder.sh: the flight recorder's GPU timestamps on the GPU machine, with
# binaries from scripts/gpu/build.sh in $B:
#   bash scripts/gpu/recorder.sh [--kernels]
# --kernels first builds the fatbin from kernels/*.cu (kernels/build.sh,
# into the log folder; over 150 s on 1x H200 with 16 cores) and runs
# everything on it (GOCCL_FATBIN); without it the binaries' embedded
# fatbin serves. Then:
# the timestamp tests (present, ordered, against CUDA events, graph
# replays) at 1 and 2 ranks sharing GPU 0 in one process; the cost of the
# stores on an 8-byte AllReduce, timestamps on against off interleaved in
# one run (median of 40 rounds of 500 calls, CUDA events); the same at 2
# processes sharing the GPU through goccl run and goccl bench, recorder on
# (GOCCL_RECORDER_SIZE=2000) against off (0), alternated (their contexts
# time-slice: noisy); and the in-process kernel tests on the new fatbin.
# Prints a short table last; logs under $OUT/recorder.
set -u
. "$(dirname "$0")/env.sh" recorder
: >"$LOGS/table.txt"
row() { printf '%s\n' "$1" >>"$LOGS/table.txt"; } # (also from the pipelines' subshells)
step() { # name timeout command...: runs it, logs it, adds a PASS/FAIL row
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  row "$(printf '%-22s %s rc=%s %ss' "$name" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$rc" "$(($(date +%s) - t0))")"
  [ $rc = 0 ] || tail -15 "$LOGS/$name.log"
  return $rc
}
if [ "${1:-}" = --kernels ]; then
  step fatbin 400 env GOCCL_FATBIN_OUT="$LOGS/goccl.fatbin" bash kernels/build.sh || exit 1
  cp kernels/manifest.json "$LOGS/manifest.json"
  export GOCCL_FATBIN=$LOGS/goccl.fatbin
fi
step stamps 90 "$B/gpu.test" -test.run 'TestGPUStamps' -test.v
grep -E -- '--- (PASS|FAIL|SKIP)|largest difference' "$LOGS/stamps.log" | sed 's/^ *//' | while read -r l; do row "  $l"; done
step stampcost 90 "$B/gpu.test" -test.run 'TestGPUStampCost' -test.v -gpu.perf
grep '^stampcost' "$LOGS/stampcost.log" | while read -r l; do row "  $l"; done
# 2 processes, recorder on against off, alternated.
for round in 1 2 3; do
  for size in 0 2000; do
    log="$LOGS/bench2-rec$size-r$round.log"
    GOCCL_RECORDER_SIZE=$size timeout -k 5 60 "$B/goccl" run -np 2 "$B/goccl" bench allreduce -b 8 -e 8 -n 2000 -w 200 \
      --backend gpu -c 0 >"$log" 2>&1 || { row "  bench2 recorder=$size r$round FAILED"; tail -5 "$log"; continue; }
    grep -E '^ +8 ' "$log" | awk -v s="$size" -v r="$round" '{printf "  bench2 np=2 recorder=%-4s r%s  time oop %s us  ip %s us\n", s, r, $6, $10}' \
      | while read -r l; do row "  $l"; done
  done
done
step kernels 100 "$B/gpu.test" -test.run 'TestGPUCollectives|TestGPUAlgorithmsForced|TestGPUGraphReplay|TestGPUBackToBack|TestGPUP2P'
echo "== recorder.sh summary"
cat "$LOGS/table.txt"
