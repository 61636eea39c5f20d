#!/usr/bin/env bash
# multinode.sh: the GPU backend across nodes on one machine, with binaries
# built by scripts/gpu/build.sh: fake nodes (GOCCL_HOSTID per rank), goccl
# inside each fake node, NCCL between them over its socket transport on
# the loopback. With one GPU every rank shares it (contexts time-slice:
# results, not speed). NCCL is found as goccl finds it (GOCCL_NCCL_PATH,
# else pip's nvidia/nccl, else the system's). Prints a table last and
# exits non-zero on any failure.
set -u
. "$(dirname "$0")/env.sh" gpu-multinode
# The fake nodes share the loopback; no RDMA.
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 GOCCL_BACKEND=gpu GOCCL_DEBUG=INFO
rows=()
bad=0
SECONDS=0
# nodes SPEC: GOCCL_HOSTID from RANK (e.g. '$((RANK / 2))').
wrap() { echo "GOCCL_HOSTID=fake-node-$1 exec \"\$0\" \"\$@\""; }
# conf NAME NP HOSTS TIMEOUT ARGS...: a conformance run; every rank must
# report its cases with 0 failed.
conf() {
  local name=$1 np=$2 hosts=$3 limit=$4 log="$LOGS/$(echo "$1" | tr -c 'A-Za-z0-9_.-' _).log" t0=$SECONDS rc cases failed
  shift 4
  if [ -n "${MN_ONLY:-}" ] && ! grep -qE -- "$MN_ONLY" <<<"$name"; then return 0; fi
  echo "=== $name"
  timeout -k 5 "$limit" "$B/goccl" run -np "$np" --tag-output sh -c "$(wrap "$hosts")" "$B/conformance" --backend gpu "$@" >"$log" 2>&1
  rc=$?
  tail -3 "$log"
  grep -E 'FAIL|error|mismatch' "$log" | head -6
  cases=$(grep -E 'conformance: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*: ([0-9]+) cases.*/\1/' | awk '{s+=$1} END {print s+0}')
  failed=$(grep -E 'conformance: rank [0-9]+: [0-9]+ cases' "$log" | sed -E 's/.*cases, ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  ranks=$(grep -cE 'conformance: rank [0-9]+: [1-9][0-9]* cases, 0 failed' "$log")
  across=$(grep -c 'goccl: gpu backend across nodes' "$log")
  [ "$rc" = 0 ] && [ "$ranks" = "$np" ] && [ "$across" = "$np" ] || bad=1
  rows+=("$(printf '%-40s %7s %7s %4s %6s %6s %5ss' "$name" "$cases" "$failed" "$rc" "$ranks/$np" "$across" $((SECONDS - t0)))")
}
nvidia-smi -L
# MN_ONLY=REGEX runs only the steps whose names match.
# Across 2 nodes an 8-bit float sum rounds twice: after the node's leg
# and after the rails' (NCCL rounds at each step of its ring).
conf "2x2 collectives (node by node)" 4 '$((RANK / 2))' 150 --counts 0,1,7,4095,1048579 --stress 100 --graph 5 --roundings 2
conf "2x2 point-to-point" 4 '$((RANK / 2))' 90 --colls none --counts 7,4095
conf "2x2 interleaved ranks" 4 '$((RANK % 2))' 90 --counts 1,4095,65537 --types int32,float32,bfloat16 --ops sum,avg,max
conf "2+1 unequal nodes (flat)" 3 '$((RANK / 2))' 90 --counts 1,4095 --types int32,float32 --ops sum,avg
conf "3x2 collectives" 6 '$((RANK / 2))' 60 --counts 1,4095 --types int32,float32 --ops sum,avg
# A rank killed mid-AllReduce, two fake nodes of one rank: the survivor's
# call fails naming it (NCCL's communicators aborted), and a new
# communicator on the GPU then works.
log="$LOGS/kill.log"; t0=$SECONDS
if [ -z "${MN_ONLY:-}" ] || grep -qE -- "$MN_ONLY" <<<"fault"; then
  timeout -k 5 60 "$B/goccl" run -np 2 --grace 60s --tag-output sh -c "$(wrap '$RANK')" "$B/gpufaults" --mode kill >"$log" 2>&1
  rc=$?
  tail -3 "$log"
  pass=$(grep -c 'gpufaults: kill: PASS' "$log")
  [ "$pass" = 1 ] || bad=1
  rows+=("$(printf '%-40s %7s %7s %4s %6s %6s %5ss' "fault: rank killed (2 nodes of 1)" 1 $((1 - pass)) "$rc" "$pass/1" "$(grep -c 'across nodes' "$log")" $((SECONDS - t0)))")
fi
# NCCL missing: init fails on every rank, naming the path and the setting.
if [ -z "${MN_ONLY:-}" ] || grep -qE -- "$MN_ONLY" <<<"NCCL missing"; then
  log="$LOGS/no_nccl.log"; t0=$SECONDS
  timeout -k 5 60 env GOCCL_NCCL_PATH=/nonexistent "$B/goccl" run -np 4 --tag-output sh -c "$(wrap '$((RANK / 2))')" "$B/conformance" --backend gpu --colls allreduce --counts 7 >"$log" 2>&1
  rc=$?
  named=0
  for r in 0 1 2 3; do grep -qE "^\[$r\].*span 2 nodes.*GOCCL_NCCL_PATH=/nonexistent" "$log" && named=$((named + 1)); done
  tail -2 "$log"
  [ "$rc" != 0 ] && [ "$named" = 4 ] || bad=1
  rows+=("$(printf '%-40s %7s %7s %4s %6s %6s %5ss' "NCCL missing: init error" - - "$rc" "$named/4" - $((SECONDS - t0)))")
fi

echo
grep -ohE '"between nodes"="[^"]*"' "$LOGS"/*.log | head -1
echo "GPU backend across fake nodes ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), ${SECONDS}s)"
printf '%-40s %7s %7s %4s %6s %6s %6s\n' step cases failed rc ranks across time
for r in "${rows[@]}"; do echo "$r"; done
exit $bad
