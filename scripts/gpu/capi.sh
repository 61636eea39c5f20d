#!/usr/bin/env bash
# capi.sh: goccl's libnccl.so.2 under programs written for NCCL, on the GPU
# machine, in one call:
#   - nccl-tests 2.19.6 built with nvcc against include/nccl.h and the
#     library (MPI=1), every test binary at small sizes with data checks:
#     one process, mpirun -np 2 and -np 4 with the ranks sharing GPU 0
#     (NCCL_TESTS_DEVICE=0), CUDA graphs (-G 20), registered buffers
#     (-R 1), split communicators (NCCL_TESTS_SPLIT), -t 2 threads where
#     there are 2 GPUs;
#   - PyTorch's torch.distributed, backend nccl, unmodified, under
#     LD_PRELOAD of the library (tests/torch/nccl_capi.py, 2 ranks).
# It prints one summary table last and exits non-zero when a step failed.
#
#   make libnccl   (here, where Go is), then on the GPU machine:
#   bash scripts/gpu/capi.sh
#
# Paths (defaults for a checkout with build/lib): GOCCL_CAPI_LIB (the
# folder of libnccl.so.2), GOCCL_CAPI_INCLUDE (our nccl.h), NCCL_TESTS_SRC
# (nccl-tests' sources), NCCL_DEVICE_INCLUDE (a folder holding NCCL 2.28's
# nccl_device.h, which nccl-tests includes when built against 2.28; pip's
# nvidia/nccl/include is found by itself, NCCL_DEVICE_INCLUDE_FALLBACK is
# used when neither is there). GOCCL_CAPI_SKIP_BUILD=1 reuses
# a build in $GOCCL_CAPI_WORK; GOCCL_CAPI_STEPS=REGEX runs only the
# nccl-tests steps whose names match; GOCCL_CAPI_TORCH=0 skips PyTorch;
# GOCCL_CAPI_DEADLINE (seconds, default 540) ends the nccl-tests steps.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
source "$HERE/env.sh" capi
ROOT=$(cd "$HERE/../.." && pwd)
LIB=${GOCCL_CAPI_LIB:-$ROOT/build/lib}
INC=${GOCCL_CAPI_INCLUDE:-$ROOT/include}
NT_SRC=${NCCL_TESTS_SRC:-$ROOT/../shared/third_party/nccl-tests-2.19.6}
TORCH_TEST=${GOCCL_CAPI_TORCH_TEST:-$ROOT/tests/torch/nccl_capi.py}
WORK=${GOCCL_CAPI_WORK:-/tmp/goccl-capi}
MPI_HOME=${MPI_HOME:-/usr/lib/x86_64-linux-gnu/openmpi}
SIZES=(-b 8 -e 1M -f 8 -n 10 -w 2 -c 1)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
rows=()
bad=0
mkdir -p "$WORK"

row() { rows+=("$(printf '%-40s %5s %7s %10s %10s %6ss  %s' "$@")"); }

# --- the library as NCCL_HOME: our header and library, and NCCL's device
# API header (nccl-tests includes it for 2.28; only its host functions
# reach the library, and those are exported).
NH=$WORK/nccl
rm -rf "$NH" && mkdir -p "$NH/include" "$NH/lib"
cp "$INC/nccl.h" "$NH/include/"
cp "$LIB/libnccl.so.2" "$NH/lib/" && ln -sf libnccl.so.2 "$NH/lib/libnccl.so"
DEVINC=${NCCL_DEVICE_INCLUDE:-}
if [ -z "$DEVINC" ]; then
  DEVINC=$(python3 - <<'EOF' 2>/dev/null
import os, nvidia.nccl as m
print(os.path.join(list(m.__path__)[0], "include"))
EOF
)
fi
[ -f "$DEVINC/nccl_device.h" ] || DEVINC=${NCCL_DEVICE_INCLUDE_FALLBACK:-}
if [ -f "$DEVINC/nccl_device.h" ]; then
  cp -r "$DEVINC/nccl_device.h" "$DEVINC/nccl_device" "$NH/include/"
else
  echo "capi.sh: no nccl_device.h found (set NCCL_DEVICE_INCLUDE)"
fi
echo "library: $(ls -la "$NH/lib/libnccl.so.2")"

# --- nccl-tests, built in the background while PyTorch runs.
NT=$WORK/nccl-tests
BIN=$NT/build
build_start=$SECONDS
if [ "${GOCCL_CAPI_SKIP_BUILD:-0}" != 1 ]; then
  rm -rf "$NT" && cp -r "$NT_SRC" "$NT"
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  # Every test binary but alltoallv (not in the list this suite runs).
  timeout 330 make -C "$NT/src" -j"$(nproc)" MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$NH" CUDA_HOME="$CUDA_HOME" \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$BIN" \
    BIN_FILES_LIST="all_reduce all_gather broadcast reduce_scatter reduce alltoall scatter gather sendrecv hypercube" \
    >"$LOGS/build.log" 2>&1 &
  build_pid=$!
fi

# --- PyTorch (2 ranks; the GPU is shared when there is one);
# GOCCL_CAPI_TORCH=0 skips it.
if [ "${GOCCL_CAPI_TORCH:-1}" = 1 ]; then
t0=$SECONDS
GOCCL_DEBUG=INFO LD_PRELOAD=$NH/lib/libnccl.so.2 timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
  "$TORCH_TEST" >"$LOGS/torch.log" 2>&1
trc=$?
grep -E "^(\[[^]]*\]:?)? *(torch |RESULT|TORCH)" "$LOGS/torch.log" | sed 's/^\[[^]]*\]:\? *//' | sort -u >"$LOGS/torch.results"
tsum=$(grep -m1 -o "TORCH [0-9]*/[0-9]*" "$LOGS/torch.log")
ours=no
grep -q "library=libnccl.so.2" "$LOGS/torch.log" && ours=yes
row "torch.distributed nccl, 2 ranks" "$trc" - - - "$((SECONDS - t0))" "${tsum:-no summary}; goccl's library logged: $ours"
# The checks that need point-to-point (all_to_all_single,
# batch_isend_irecv) fail on a build without it; any other is a failure.
if grep "RESULT" "$LOGS/torch.results" | grep -v " PASS" | grep -vqE "all_to_all_single|batch_isend_irecv"; then bad=1; fi
[ -n "$tsum" ] || bad=1

# PyTorch's non-blocking communicators (ncclInProgress, polled with
# ncclCommGetAsyncError), on the collectives only.
t0=$SECONDS
TORCH_NCCL_USE_COMM_NONBLOCKING=1 NCCL_CAPI_ONLY=all_reduce/ LD_PRELOAD=$NH/lib/libnccl.so.2 timeout 120 \
  python3 -m torch.distributed.run --standalone --nproc_per_node=2 "$TORCH_TEST" >"$LOGS/torch-nonblocking.log" 2>&1
nrc=$?
nsum=$(grep -m1 -o "TORCH [0-9]*/[0-9]*" "$LOGS/torch-nonblocking.log")
row "torch nccl, non-blocking comms" "$nrc" - - - "$((SECONDS - t0))" "${nsum:-no summary}"
[ $nrc -eq 0 ] || bad=1
fi

if [ -n "${build_pid:-}" ]; then
  wait "$build_pid"
  rc=$?
  row "build nccl-tests (nvcc, MPI=1)" "$rc" - - - "$((SECONDS - build_start))" "$(ls "$BIN"/*_perf 2>/dev/null | wc -l) binaries"
  if [ $rc -ne 0 ]; then bad=1; grep -m5 -iE "error" "$LOGS/build.log"; tail -15 "$LOGS/build.log"; fi
fi
export LD_LIBRARY_PATH=$NH/lib:${LD_LIBRARY_PATH:-}

# nt NAME EXPECT TIMEOUT CMD...: one nccl-tests run; its data checks
# (#wrong, out-of-bounds values) decide. EXPECT "fail" marks the runs that
# need what this build's GPU backend lacks (point-to-point): their failure
# is reported, not counted.
nt() {
  local name=$1 expect=$2 to=$3 log
  shift 3
  # GOCCL_CAPI_STEPS=REGEX runs only the steps whose names match.
  if [ -n "${GOCCL_CAPI_STEPS:-}" ] && ! grep -qE "$GOCCL_CAPI_STEPS" <<<"$name"; then
    return
  fi
  # One device call holds the whole script: past the deadline, what is
  # left is named, not run.
  if [ $((SECONDS + to / 2)) -gt "${GOCCL_CAPI_DEADLINE:-540}" ]; then
    row "$name" - - - - 0 "skipped: past the script's deadline"
    return
  fi
  log=$LOGS/$(echo "$name" | tr ' /,=' '____' | tr -d "()'").log
  local t0=$SECONDS
  timeout "$to" "$@" >"$log" 2>&1
  local rc=$?
  # Data rows: size count type redop root time algbw busbw #wrong (out of
  # place) time algbw busbw #wrong (in place).
  local wrong small large
  # Counted from the end: hypercube's rows have no redop column.
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { a = $(NF-4); b = $NF; w += (a ~ /^[0-9]+$/ ? a : 0) + (b ~ /^[0-9]+$/ ? b : 0); n++ } END { print (n ? w : "-") }' "$log")
  small=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $(NF-7); exit }' "$log")
  large=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { t = $(NF-7) } END { print t }' "$log")
  local note=""
  if [ "$expect" = nccl ]; then
    note="$(grep -m1 -o "nccl-library=[0-9]*" "$log"); "
  else
    grep -q "nccl-library=22800" "$log" || note="goccl's version line missing; "
  fi
  if [ $rc -eq 0 ] && [ "$wrong" = 0 ] && grep -q "Out of bounds values : 0 OK" "$log"; then
    note+="ok"
  elif [ "$expect" = fail ]; then
    note+="expected (no GPU point-to-point in this build): $(grep -m1 -iE 'failure|error|failed' "$log" | cut -c1-90)"
  else
    note+="FAILED: $(grep -m1 -iE 'failure|error|failed|wrong' "$log" | cut -c1-90)"
    bad=1
  fi
  row "$name" "$rc" "${wrong:--}" "${small:--}" "${large:--}" "$((SECONDS - t0))" "$note"
}

MPI=(mpirun --allow-run-as-root --bind-to none --oversubscribe -x LD_LIBRARY_PATH -x NCCL_TESTS_DEVICE=0
  -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
COLL=(all_reduce all_gather broadcast reduce_scatter reduce)
P2P=(alltoall sendrecv gather scatter hypercube)
if [ -x "$BIN/all_reduce_perf" ]; then
  GOCCL_DEBUG=INFO nt "all_reduce 1 proc (GOCCL_DEBUG=INFO)" ok 60 "$BIN/all_reduce_perf" "${SIZES[@]}" -g 1
  grep -h -m1 "NCCL C API library" "$LOGS"/*.log | head -1
  for t in "${COLL[@]:1}"; do nt "$t 1 proc" ok 60 "$BIN/${t}_perf" "${SIZES[@]}" -g 1; done
  for t in "${COLL[@]}"; do nt "$t mpirun -np 2, GPU 0" ok 90 "${MPI[@]}" -np 2 "$BIN/${t}_perf" "${SIZES[@]}"; done
  for t in "${COLL[@]}"; do nt "$t mpirun -np 4, GPU 0" ok 120 "${MPI[@]}" -np 4 "$BIN/${t}_perf" "${SIZES[@]}"; done
  for t in "${COLL[@]}"; do nt "$t -np 2 -G 20 (graphs)" ok 120 "${MPI[@]}" -np 2 "$BIN/${t}_perf" "${SIZES[@]}" -G 20; done
  for t in all_reduce all_gather; do nt "$t -np 2 -R 1 (registered)" ok 90 "${MPI[@]}" -np 2 "$BIN/${t}_perf" "${SIZES[@]}" -R 1; done
  # Symmetric windows: ncclCommWindowRegister inside a group, goccl's
  # collective Register behind it.
  for t in all_reduce all_gather broadcast; do nt "$t -np 2 -R 2 (windows)" ok 90 "${MPI[@]}" -np 2 "$BIN/${t}_perf" "${SIZES[@]}" -R 2; done
  # Other types and operators (float/sum above).
  for dop in "half max" "bfloat16 avg" "int8 prod" "double min" "int64 sum" "uint8 max" \
    "f8e4m3 sum" "f8e5m2 max" "float mulsum" "bfloat16 mulsum"; do
    set -- $dop
    nt "all_reduce -np 2 -d $1 -o $2" ok 90 "${MPI[@]}" -np 2 "$BIN/all_reduce_perf" "${SIZES[@]}" -d "$1" -o "$2"
  done
  nt "reduce_scatter -np 2 -d bfloat16 -o avg" ok 90 "${MPI[@]}" -np 2 "$BIN/reduce_scatter_perf" "${SIZES[@]}" -d bfloat16 -o avg
  nt "reduce -np 2 -d int32 -o min" ok 90 "${MPI[@]}" -np 2 "$BIN/reduce_perf" "${SIZES[@]}" -d int32 -o min
  nt "reduce_scatter -np 2 -d half -o mulsum" ok 90 "${MPI[@]}" -np 2 "$BIN/reduce_scatter_perf" "${SIZES[@]}" -d half -o mulsum
  nt "all_reduce -np 4 SPLIT=MOD2" ok 120 "${MPI[@]}" -np 4 -x NCCL_TESTS_SPLIT="MOD 2" "$BIN/all_reduce_perf" "${SIZES[@]}"
  if [ "$NGPU" -ge 2 ]; then
    nt "all_reduce -t 2 (2 GPUs)" ok 90 env -u NCCL_TESTS_DEVICE "$BIN/all_reduce_perf" "${SIZES[@]}" -t 2
  else
    row "all_reduce -t 2" - - - - 0 "skipped: -t 2 drives GPUs 0 and 1; this machine has $NGPU"
  fi
  # The same binaries on NCCL's own library (pip's), one process: the
  # side-by-side small-message times (NCCL refuses two ranks on one GPU).
  NCCL_LIB=$(dirname "$DEVINC")/lib
  if [ -f "$NCCL_LIB/libnccl.so.2" ]; then
    for t in "${COLL[@]}"; do
      LD_LIBRARY_PATH=$NCCL_LIB:$LD_LIBRARY_PATH nt "$t 1 proc on NCCL's library" nccl 60 "$BIN/${t}_perf" "${SIZES[@]}" -g 1
    done
  else
    row "NCCL's library, 1 proc" - - - - 0 "skipped: no libnccl.so.2 next to $DEVINC"
  fi
  for t in "${P2P[@]}"; do nt "$t 1 proc" fail 40 "$BIN/${t}_perf" "${SIZES[@]}" -g 1; done
  for t in "${P2P[@]}"; do nt "$t mpirun -np 2, GPU 0" fail 40 "${MPI[@]}" -np 2 "$BIN/${t}_perf" "${SIZES[@]}"; done
else
  row "nccl-tests runs" - - - - 0 "skipped: no binaries (see build.log)"
  bad=1
fi

{
  echo
  echo "== PyTorch checks (rank lines, deduplicated)"
  cat "$LOGS/torch.results" 2>/dev/null
  echo
  echo "capi summary ($NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), ${SECONDS}s)"
  printf '%-40s %5s %7s %10s %10s %7s  %s\n' step rc wrong "t(8B) us" "t(max) us" time note
  printf '%s\n' "${rows[@]}"
  if [ $bad -eq 0 ]; then echo "capi: PASS"; else echo "capi: FAIL"; fi
} | tee "$LOGS/summary.txt"
exit $bad
