#!/usr/bin/env bash
# all.sh: one call that compiles the kernels with nvcc and runs the GPU
# scripts against the new fatbin, most recent work first, until a deadline:
#   scripts/gpu/build.sh && make libnccl    (here, where Go is), then on the
#   GPU machine: bash scripts/gpu/all.sh
# The fatbin and manifest.json land in $OUT/kernels (commit both), each
# script's logs and table under $OUT. nccl-tests is built (capi.sh) while
# the kernels compile. Steps that would start past GOCCL_ALL_DEADLINE
# seconds (default 570) are skipped and named in the summary.
# GOCCL_ALL_STEPS=REGEX runs only the steps whose names match; without the
# kernels step the committed fatbin is tested. GOCCL_ALL_P2P_ONLY picks
# p2p.sh's steps.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh" gpu-all
ROOT=$(cd "$HERE/../.." && pwd)
DEADLINE=${GOCCL_ALL_DEADLINE:-570}
export PATH=$PATH:/usr/local/cuda/bin
rows=()
bad=0
SECONDS=0

# part NAME TIMEOUT CMD...: runs CMD under TIMEOUT (cut to the deadline),
# its output in $LOGS/NAME.log, its last table kept for the summary.
part() {
  local name=$1 limit=$2 log t0=$SECONDS rc left
  shift 2
  log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' _).log"
  if [ -n "${GOCCL_ALL_STEPS:-}" ] && ! grep -qE -- "$GOCCL_ALL_STEPS" <<<"$name"; then
    return 0
  fi
  left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 20 ]; then
    rows+=("$(printf '%-28s %5s %6s  %s' "$name" - - "skipped: past the deadline")")
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  [ $rc = 0 ] || bad=1
  tail -n 40 "$log"
  rows+=("$(printf '%-28s %5s %5ss' "$name" "$rc" $((SECONDS - t0)))")
}

# nccl-tests compile on the CPUs while the kernels do.
if [ -z "${GOCCL_ALL_STEPS:-}" ] || grep -qE -- "$GOCCL_ALL_STEPS" <<<"C API (capi.sh)"; then
  GOCCL_CAPI_TORCH=0 GOCCL_CAPI_STEPS='^$' OUT=$LOGS/prebuild bash "$HERE/capi.sh" >"$LOGS/nccl-tests-build.log" 2>&1 &
  prebuild=$!
fi
mkdir -p "${OUT:-/tmp}/kernels"
FATBIN=${OUT:-/tmp}/kernels/goccl.fatbin
part "kernels (nvcc)" 420 bash -c 'cd "$0/kernels" && GOCCL_FATBIN_OUT="$1" bash build.sh' "$ROOT" "$FATBIN"
# Steps chosen without the kernels: the committed fatbin is tested.
if [ -n "${GOCCL_ALL_STEPS:-}" ] && ! grep -qE -- "$GOCCL_ALL_STEPS" <<<"kernels (nvcc)"; then
  cp "$ROOT/kernels/goccl.fatbin" "$FATBIN"
fi
if [ ! -s "$FATBIN" ]; then
  echo "all.sh: no fatbin; nothing to test"
  exit 1
fi
cp "$ROOT/kernels/manifest.json" "${OUT:-/tmp}/kernels/"
export GOCCL_FATBIN=$FATBIN

part "new kernels (gpu.test)" 120 "$B/gpu.test" -test.run 'TestGPU(PreMulSum|GroupFusion|AllToAllOneShot|Stamp|P2P|CopyEngine$|CopyEngineReductions|RegisteredReductions)' -test.v -test.timeout 110s
part "point-to-point (p2p.sh)" 150 env GOCCL_P2P_ONLY="${GOCCL_ALL_P2P_ONLY:-^p2pgpu, [234] procs\$|conformance, [23] procs}" bash "$HERE/p2p.sh"
[ -n "${prebuild:-}" ] && wait "$prebuild"
part "C API (capi.sh)" 150 env GOCCL_CAPI_SKIP_BUILD=1 GOCCL_CAPI_DEADLINE=130 \
  GOCCL_CAPI_STEPS='1 proc \(|np 2, GPU|np 4, GPU 0|R 2|mulsum|f8e|SPLIT' bash "$HERE/capi.sh"
part "faults (suite.sh)" 90 env GOCCL_SUITE_ONLY='Shrink|killed mid' bash "$HERE/suite.sh" --no-large
part "across nodes (multinode.sh)" 90 env MN_ONLY='2x2 collectives|point-to-point' bash "$HERE/multinode.sh"
part "recorder (recorder.sh)" 120 bash "$HERE/recorder.sh"

echo
echo "all.sh summary ($(nvidia-smi -L | grep -c '^GPU') x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), ${SECONDS}s)"
printf '%-28s %5s %6s\n' part rc time
printf '%s\n' "${rows[@]}"
exit $bad
