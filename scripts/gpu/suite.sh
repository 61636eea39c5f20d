#!/usr/bin/env bash
# suite.sh: goccl's GPU suite, run from the repo root on the 2-GPU machine
# (2x H200 or any two GPUs) with binaries built by scripts/gpu/build.sh. It needs no
# Go there. With --kernels it first compiles kernels/*.cu (make kernels) and
# points GOCCL_FATBIN at the result, so one call compiles and tests.
# It prints a summary table last and exits non-zero on any failure.
# On a machine with one GPU the two-rank steps put both ranks
# on it (their contexts time-slice, so it checks results, not speed) and
# the one step that needs two devices in one process is skipped, named in
# the summary.
# GOCCL_SUITE_ONLY=REGEX runs only the steps whose names match (grep -E),
# e.g. 'registered|reductions|landed|gpu.test' for the copy-engine steps
# and the in-process kernel tests after a change there.
set -u
. "$(dirname "$0")/env.sh" gpu-suite
KERNELS=0
LARGE=${GOCCL_SUITE_LARGE:-64Mi}
HUGE=${GOCCL_SUITE_HUGE-1Gi}  # set empty to skip
for a in "$@"; do
  case $a in
    --kernels) KERNELS=1 ;;
    --no-large) LARGE= HUGE= ;;
    *) echo "usage: suite.sh [--kernels] [--no-large]" >&2; exit 2 ;;
  esac
done

rows=()
bad=0
skipped=0
SECONDS=0
# record NAME RC LOG: pulls "cases, failed" from the log.
record() {
  local name=$1 rc=$2 log=$3 cases failed
  if grep -q 'conformance: all' "$log"; then
    cases=$(grep 'conformance: all' "$log" | tail -1 | sed -E 's/.*: ([0-9]+) cases, ([0-9]+) failed.*/\1/')
    failed=$(grep 'conformance: all' "$log" | tail -1 | sed -E 's/.*: ([0-9]+) cases, ([0-9]+) failed.*/\2/')
  elif grep -q 'conformance: rank' "$log"; then
    cases=$(grep -E 'conformance: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*: ([0-9]+) cases.*/\1/' | awk '{s+=$1} END {print s+0}')
    failed=$(grep -E 'conformance: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*cases, ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  elif grep -qE '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log"; then
    cases=$(grep -E '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*: ([0-9]+) cases.*/\1/' | awk '{s+=$1} END {print s+0}')
    failed=$(grep -E '^p2pgpu: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*cases, ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  elif grep -qE '^gpufaults: [a-z]+: (PASS|FAIL)' "$log"; then
    cases=$(grep -cE '^gpufaults: [a-z]+: (PASS|FAIL)' "$log")
    failed=$(grep -cE '^gpufaults: [a-z]+: FAIL' "$log")
  else
    cases=$(grep -cE '^\s*--- (PASS|FAIL)' "$log")
    failed=$(grep -cE '^\s*--- FAIL' "$log")
  fi
  cases=${cases:-0}; failed=${failed:-0}
  if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then failed="rc=$rc"; fi
  [ "$rc" != 0 ] && bad=1
  rows+=("$(printf '%-34s %8s %8s %5s %6ss' "$name" "$cases" "$failed" "$rc" "$4")")
}
# step NAME TIMEOUT CMD...: runs CMD with its output in a log.
step() {
  local name=$1 limit=$2 log="$LOGS/$(echo "$1" | tr -c 'A-Za-z0-9_.-' _).log" t0=$SECONDS rc
  shift 2
  if [ -n "${GOCCL_SUITE_ONLY:-}" ] && ! grep -qE -- "$GOCCL_SUITE_ONLY" <<<"$name"; then
    return 0
  fi
  echo "=== $name: $*"
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  tail -4 "$log"
  grep -E 'FAIL|error|mismatch' "$log" | head -8
  record "$name" $rc "$log" $((SECONDS - t0))
}

if [ $KERNELS = 1 ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  GOCCL_SUITE_ONLY= step "make kernels" 300 make kernels  # whatever ONLY says
  export GOCCL_FATBIN=$PWD/kernels/goccl.fatbin
fi
nvidia-smi -L
NGPU=$(nvidia-smi -L | grep -c '^GPU')
# skip NAME REASON: a step this machine cannot run, named in the summary.
skip() {
  rows+=("$(printf '%-34s %8s %8s %5s %7s  skipped: %s' "$1" - - - - "$2")")
  skipped=$((skipped + 1))
}

CONF=("$B/conformance" --backend gpu --graph 100 --stress 1000)
step "driver tests (internal/cuda)" 120 "$B/cuda.test" -test.run GPU -test.v
step "kernels in-process (gpu.test)" 180 "$B/gpu.test" -test.run GPU -test.v
for p in uva ipc vmm; do
  [ -x "$B/$p.test" ] && step "transport $p tests" 120 "$B/$p.test" -test.v
done
step "2 procs, goccl run, ipc" 150 env GOCCL_TRANSPORT=ipc "$B/goccl" run -np 2 "${CONF[@]}"
step "2 procs, goccl run, vmm, large" 300 env GOCCL_TRANSPORT=vmm "$B/goccl" run -np 2 "${CONF[@]}" ${LARGE:+--large $LARGE}
[ -n "$HUGE" ] && step "2 procs, goccl run, ipc, $HUGE" 240 env GOCCL_TRANSPORT=ipc "$B/goccl" run -np 2 "$B/conformance" --backend gpu --counts 1 --large "$HUGE"
# Registered buffers (comm.Alloc): Broadcast/AllGather on the copy-engine
# path (cuMemcpyAsync into the peers' buffers, stream memory ops), forced at
# every size (by default it starts at 32-128 MiB).
REG=("$B/conformance" --backend gpu --register --colls broadcast,all_gather --counts 0,1,7,4095,1048579 --large 64Mi)
step "2 procs, vmm, registered (ce)" 180 env GOCCL_TRANSPORT=vmm GOCCL_ALGO=ce "$B/goccl" run -np 2 "${REG[@]}"
step "2 procs, ipc, registered (ce)" 180 env GOCCL_TRANSPORT=ipc GOCCL_ALGO=ce "$B/goccl" run -np 2 "${REG[@]}"
# The copy-engine reductions: AllReduce into registered buffers, and
# ReduceScatter (registered or not), forced at every size.
CERED=("$B/conformance" --backend gpu --colls all_reduce,reduce_scatter --counts 0,1,7,4095,1048579 --large 64Mi --stress 300)
step "2 procs, vmm, ce reductions (registered)" 180 env GOCCL_TRANSPORT=vmm GOCCL_ALGO=ce "$B/goccl" run -np 2 "${CERED[@]}" --register
step "2 procs, ipc, ce reductions" 180 env GOCCL_TRANSPORT=ipc GOCCL_ALGO=ce "$B/goccl" run -np 2 "${CERED[@]}"
# Registered buffers chosen by size (thresholds and floors lowered so that
# the direct mode cuts several chunks from 1 MiB), in graphs too, where the
# copy engines step aside for the kernels.
step "2 procs, vmm, registered by size" 180 env GOCCL_TRANSPORT=vmm GOCCL_TUNE=ce.all_reduce=1M,ce.reduce_scatter=1M,cefloor.all_reduce=256K,cefloor.reduce_scatter=64K "$B/goccl" run -np 2 "$B/conformance" --backend gpu --register --counts 0,1,7,4095,1048579 --large 64Mi --graph 20 --stress 300
# The ranks' own cuMemAlloc buffers registered with Register (as a
# framework's tensors; on vmm through IPC handles), every collective on the
# copy engines from 1 MiB, and on ipc forced at every size.
UREG=("$B/conformance" --backend gpu --register-user --counts 0,1,7,4095,1048579 --large 64Mi --stress 300)
step "2 procs, vmm, user memory registered" 180 env GOCCL_TRANSPORT=vmm GOCCL_TUNE=ce.all_reduce=1M,ce.reduce_scatter=1M,ce.broadcast=1M,ce.all_gather=1M,cefloor.all_reduce=256K,cefloor.reduce_scatter=64K "$B/goccl" run -np 2 "${UREG[@]}"
step "2 procs, ipc, user memory registered (ce)" 180 env GOCCL_TRANSPORT=ipc GOCCL_ALGO=ce "$B/goccl" run -np 2 "${UREG[@]}" --colls broadcast,all_gather,all_reduce
# Landing slots of 64 KiB, so that Broadcasts from 128 KiB land: the
# halves alternate and the signal stream's flags race the next calls.
step "2 procs, vmm, landed Broadcast 64K" 180 env GOCCL_TRANSPORT=vmm GOCCL_ALGO=ce GOCCL_TUNE=celand=64K "$B/goccl" run -np 2 "${UREG[@]}" --colls broadcast,all_gather
# The algorithms the size choice skips at 2 ranks: two-shot, and one-shot
# where LL would run; plus the widest grid on small staging slots.
step "2 procs, twoshot forced" 150 env GOCCL_ALGO=twoshot "$B/goccl" run -np 2 "$B/conformance" --backend gpu --colls all_reduce --graph 20 --stress 300
step "2 procs, oneshot forced" 150 env GOCCL_ALGO=oneshot "$B/goccl" run -np 2 "$B/conformance" --backend gpu --colls all_reduce --graph 20 --stress 300
step "2 procs, grid=128,slot=4K" 150 env GOCCL_TUNE=grid=128,slot=4K,blockbytes=2K "$B/goccl" run -np 2 "${CONF[@]}"
if [ "$NGPU" -ge 2 ]; then
  step "2 GPUs in 1 proc (uva)" 150 "${CONF[@]}" --inprocess 2
else
  skip "2 GPUs in 1 proc (uva)" "needs 2 GPUs, this machine has $NGPU"
fi
if command -v mpirun >/dev/null; then
  step "2 procs, Open MPI mpirun" 150 mpirun --allow-run-as-root -np 2 "${CONF[@]}"
else
  rows+=("$(printf '%-34s %8s %8s %5s %7s' "2 procs, Open MPI mpirun" - "no mpirun" 1 -)"); bad=1
fi
step "1 rank, 1 GPU" 120 "$B/goccl" run -np 1 "${CONF[@]}"
# Faults on GPUs: a rank killed while its peer's kernel spins (the
# launcher's exit status is the killed rank's, so only the survivor's
# verdict counts), then create/destroy cycles.
step "fault: rank killed mid-AllReduce" 90 bash -c 'out=$("$0" run -np 2 --grace 60s "$1" --mode kill 2>&1); echo "$out"; grep -q "^gpufaults: kill: PASS" <<<"$out"' "$B/goccl" "$B/gpufaults"
step "fault: rank killed, survivors Shrink" 120 bash -c 'out=$("$0" run -np 3 --grace 60s "$1" --mode shrink --count 1048576 2>&1); echo "$out"; [ "$(grep -c "^gpufaults: shrink: PASS" <<<"$out")" = 2 ]' "$B/goccl" "$B/gpufaults"
step "fault: GPU comm create/destroy" 150 "$B/gpufaults" --mode cycles --cycles 1000 --budget ${GOCCL_SUITE_CYCLE_BUDGET:-100s}
step "example gradavg, 2 ranks" 60 "$B/goccl" run -np 2 "$B/gradavg"
# Point-to-point (tests/p2pgpu; scripts/gpu/p2p.sh has the fuller check):
# rings, all pairs, AllToAll(v), Gather, Scatter and a replayed graph.
for n in 2 3; do
  step "p2p, $n procs (p2pgpu)" 180 "$B/goccl" run -np $n "$B/p2pgpu"
done
# A count-0 AllReduce on one rank: every rank must fail naming both call numbers.
step "calls: count 0 on one rank" 120 bash -c 'out=$("$0" run -np 2 "$1" -mode count0 2>&1); echo "$out"; [ "$(grep -c ": PASS" <<<"$out")" = 2 ]' "$B/goccl" "$B/p2pgpu"

echo
echo "GPU suite summary ($NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), ${SECONDS}s)"
printf '%-34s %8s %8s %5s %7s\n' step cases failed rc time
for r in "${rows[@]}"; do echo "$r"; done
if [ ${#rows[@]} = 0 ]; then echo "GPU suite: no step matched GOCCL_SUITE_ONLY=${GOCCL_SUITE_ONLY:-}"; exit 2; fi
note=${GOCCL_SUITE_ONLY:+, only the steps matching $GOCCL_SUITE_ONLY}
[ $skipped -gt 0 ] && note="$note, $skipped step(s) skipped on $NGPU GPU(s)"
if [ $bad = 0 ]; then echo "GPU suite: PASS${note:+ (${note#, })}"; else echo "GPU suite: FAIL${note:+ (${note#, })}"; fi
exit $bad
