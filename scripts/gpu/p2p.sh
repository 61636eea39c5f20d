#!/usr/bin/env bash
# p2p.sh: the point-to-point check on a GPU machine, in one call, with
# binaries built by scripts/gpu/build.sh (in $B). With --kernels it first
# compiles kernels/*.cu (make kernels), points GOCCL_FATBIN at the result
# and, when $OUT is set, copies the fatbin and manifest.json to
# $OUT/kernels. Steps: the in-process kernel tests of collectives/gpu
# (rings, self copies, graph replay; one rank a GPU), tests/p2pgpu as 2, 3
# and 4 processes sharing the GPUs (rings of every dtype at counts 0 to
# 1Mi+3, all pairs in reverse order with repeats, AllToAll, AllToAllv,
# Gather, Scatter, a ring in a CUDA graph replayed with new inputs), the
# same at 2 over ipc, rings of Sends before Recvs outside any group at 2
# and 3 (eager), a pair whose counts disagree (both ranks must fail
# with ErrInvalidCount), ranks that meet in calls of different numbers
# (every rank must fail with ErrCallMismatch) and, where $B has it, the
# collectives' conformance (every call, point-to-point included) at 2, 3
# and 4 ranks. It prints a table last and exits
# non-zero on any failure. GOCCL_P2P_ONLY=REGEX runs only the steps whose
# names match (grep -E), and make kernels.
set -u
. "$(dirname "$0")/env.sh" gpu-p2p
KERNELS=0
for a in "$@"; do
  case $a in
    --kernels) KERNELS=1 ;;
    *) echo "usage: p2p.sh [--kernels]" >&2; exit 2 ;;
  esac
done
rows=()
bad=0
SECONDS=0
# step NAME TIMEOUT CMD...: runs CMD with its output in a log; cases and
# failures come from p2pgpu's per-rank totals or from go test's lines.
step() {
  local name=$1 limit=$2 log="$LOGS/$(echo "$1" | tr -c 'A-Za-z0-9_.-' _).log" t0=$SECONDS rc cases failed
  shift 2
  if [ -n "${GOCCL_P2P_ONLY:-}" ] && [ "$name" != "make kernels" ] && ! grep -qE -- "$GOCCL_P2P_ONLY" <<<"$name"; then
    return 0
  fi
  echo "=== $name: $*"
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  tail -3 "$log"
  grep -E 'FAIL|panic' "$log" | head -8
  if grep -qE '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log"; then
    cases=$(grep -E '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*: ([0-9]+) cases.*/\1/' | awk '{s+=$1} END {print s+0}')
    failed=$(grep -E '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*cases, ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  elif grep -q 'conformance: all' "$log"; then
    cases=$(grep 'conformance: all' "$log" | tail -1 | sed -E 's/.*: ([0-9]+) cases, ([0-9]+) failed.*/\1/')
    failed=$(grep 'conformance: all' "$log" | tail -1 | sed -E 's/.*: ([0-9]+) cases, ([0-9]+) failed.*/\2/')
  else
    cases=$(grep -cE '^\s*--- (PASS|FAIL)' "$log")
    failed=$(grep -cE '^\s*--- FAIL' "$log")
  fi
  cases=${cases:-0}; failed=${failed:-0}
  if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then failed="rc=$rc"; fi
  [ "$rc" != 0 ] && bad=1
  rows+=("$(printf '%-34s %8s %8s %5s %6ss' "$name" "$cases" "$failed" "$rc" $((SECONDS - t0)))")
}

if [ $KERNELS = 1 ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  step "make kernels" 560 make kernels
  if [ $bad != 0 ]; then
    cat "$LOGS"/make_kernels*.log
    exit 1
  fi
  export GOCCL_FATBIN=$PWD/kernels/goccl.fatbin
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/kernels" && cp kernels/goccl.fatbin kernels/manifest.json "$OUT/kernels/"
  fi
fi
nvidia-smi -L
step "kernels in-process (gpu.test)" 150 "$B/gpu.test" -test.run GPU -test.v
for n in 2 3 4; do
  step "p2pgpu, $n procs" 180 "$B/goccl" run -np $n "$B/p2pgpu"
done
step "p2pgpu, 2 procs, ipc" 150 env GOCCL_TRANSPORT=ipc "$B/goccl" run -np 2 "$B/p2pgpu" -replays 5
step "p2pgpu, counts disagree, 2 procs" 120 bash -c 'out=$("$0" run -np 2 "$1" -mode mismatch 2>&1); echo "$out"; [ "$(grep -c "mismatch: PASS" <<<"$out")" = 2 ]' "$B/goccl" "$B/p2pgpu"
# Sends before Recvs outside any group, eager below the limit.
for n in 2 3; do
  step "p2pgpu, eager ring, $n procs" 100 "$B/goccl" run -np $n "$B/p2pgpu" -mode eager
done
# Ranks in calls of different numbers: rank 1 makes an AllReduce (LL at
# 4 KB, staged at 4 MiB) with count 0; every rank must fail.
for m in "2 1000" "2 1048576" "3 1000"; do
  set -- $m
  step "p2pgpu, count0 x $2, $1 procs" 120 bash -c 'out=$("$0" run -np "$2" "$1" -mode count0 -count "$3" 2>&1); echo "$out"; [ "$(grep -c ": PASS" <<<"$out")" = "$2" ]' "$B/goccl" "$B/p2pgpu" "$1" "$2"
done
if [ -x "$B/conformance" ]; then
  step "collectives conformance, 2 procs" 200 "$B/goccl" run -np 2 "$B/conformance" --backend gpu --graph 20 --stress 300
  for n in 3 4; do
    step "collectives conformance, $n procs" 240 "$B/goccl" run -np $n "$B/conformance" --backend gpu --graph 5 --stress 50
  done
fi

echo
echo "point-to-point summary ($(nvidia-smi -L | grep -c '^GPU') x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), ${SECONDS}s)"
printf '%-34s %8s %8s %5s %7s\n' step cases failed rc time
for r in "${rows[@]}"; do echo "$r"; done
exit $bad
