#!/usr/bin/env bash
# perf.sh: goccl beside NCCL on the GPU machine, in one run.
# Binaries come from scripts/gpu/build.sh (carried in .gpu); NCCL is reached
# through PyTorch's torch.distributed (bench/nccl/nccl_bench.py). Each
# collective runs once per tool with the same sizes and mode; compare.py
# prints size, both times and busbw, and the speedup; `goccl plot` draws
# both busbw curves. Raw JSON and the plots land in $OUT/perf.tgz.
#   bash scripts/gpu/perf.sh [quick|reg|regred|huge|mid|user]
# quick: AllReduce only; reg: the registered-buffer (copy engine) runs only;
# regred: AllReduce and ReduceScatter on registered buffers; huge: 1 and 2
# GiB only, every collective (Broadcast/AllGather registered, AllReduce and
# ReduceScatter both ways); mid: AllReduce from 256 KiB to 32 MiB in steps
# of 2 (the 1.5x target's range, every power of two), graph and eager;
# user: every collective (or PERF_COLLS) from 128 MiB (or PERF_MIN) to
# PERF_MAX on the ranks' own cuMemAlloc buffers registered with
# comm.Register (-R 1, as a framework registers its tensors; on vmm, the
# default, through IPC handles).
set -u
. "$(dirname "$0")/env.sh" perf
export PYTHONUNBUFFERED=1
D=$(mktemp -d)/perf
mkdir -p "$D"
MAX=${PERF_MAX:-1G}
NP=${PERF_NP:-2}
TORCHRUN=(python3 -m torch.distributed.run --standalone --nproc_per_node="$NP")

# run NAME GOCCL_ARGS -- NCCL_ARGS
run() {
  local name=$1; shift
  local g=() n=()
  while [ "$1" != "--" ]; do g+=("$1"); shift; done; shift
  n=("$@")
  echo "=== $name"
  timeout -k 5 150 "$B/goccl" run -np "$NP" "$B/goccl" bench "${g[@]}" --backend gpu -c 0 \
    -a 3 --label goccl --json "$D/goccl_$name.json" >"$D/goccl_$name.txt" 2>&1 || { echo "goccl $name failed"; tail -5 "$D/goccl_$name.txt"; }
  # PERF_NO_NCCL=1 skips NCCL (pair with an earlier run's JSON instead).
  [ -n "${PERF_NO_NCCL:-}" ] && return
  timeout -k 5 150 "${TORCHRUN[@]}" bench/nccl/nccl_bench.py "${n[@]}" --json "$D/nccl_$name.json" \
    >"$D/nccl_$name.txt" 2>&1 || { echo "nccl $name failed"; tail -5 "$D/nccl_$name.txt"; }
}

MODE=${1:-full}
# The runs of each mode, in order.
E=(-b 8 -e "$MAX" -f 4 -n 20 -w 5)
# AllReduce in CUDA graphs up to 32 MiB, under NAME, with goccl's extra
# arguments after it: goccl -n 20 -G 20, NCCL -n 100 --graph 20.
allreduce_graph() {
  local name=$1 G=(-b 8 -e 32M -f 4 -w 5)
  shift
  run "$name" all_reduce "${G[@]}" -n 20 -G 20 "$@" -- --coll all_reduce "${G[@]}" -n 100 --graph 20
}
allreduce_eager() {
  run all_reduce_eager all_reduce "${E[@]}" -- --coll all_reduce "${E[@]}"
  allreduce_graph all_reduce_graph
  run all_reduce_bf16 all_reduce "${E[@]}" -d bfloat16 -- --coll all_reduce "${E[@]}" -d bfloat16
}
# Registered buffers (-R 2: comm.Alloc): copy engines from 1 MiB per rank.
# NCCL runs as above (eager, its own buffers).
bcast_gather_reg() {
  for c in broadcast all_gather; do
    run "${c}_reg" "$c" "${E[@]}" -R 2 -- --coll "$c" "${E[@]}"
  done
}
case $MODE in
  full)
    allreduce_eager
    for c in broadcast all_gather reduce_scatter; do
      run "$c" "$c" "${E[@]}" -- --coll "$c" "${E[@]}"
    done
    bcast_gather_reg ;;
  quick) allreduce_eager ;;
  reg) bcast_gather_reg ;;
  regred)
    # AllReduce and ReduceScatter with both buffers registered (-R 2): the
    # copy engines' direct mode from its thresholds, out of place (in place
    # the kernels). NCCL runs with its own buffers (torch.distributed
    # registers none).
    run all_reduce_reg all_reduce "${E[@]}" -R 2 -- --coll all_reduce "${E[@]}"
    allreduce_graph all_reduce_reg_graph -R 2
    run reduce_scatter_reg reduce_scatter "${E[@]}" -R 2 -- --coll reduce_scatter "${E[@]}" ;;
  huge)
    H=(-b 1G -e 2G -f 2 -n 10 -w 3)
    for c in all_reduce reduce_scatter; do
      run "${c}_huge" "$c" "${H[@]}" -- --coll "$c" "${H[@]}"
    done
    for c in broadcast all_gather all_reduce reduce_scatter; do
      run "${c}_reg_huge" "$c" "${H[@]}" -R 2 -- --coll "$c" "${H[@]}"
    done ;;
  mid)
    M=(-b 256K -e 32M -f 2 -w 5)
    # Graph runs as in full mode: goccl -n 20 -G 20, NCCL -n 100 --graph 20.
    # Eager runs 100 ops a timing on both sides: with 20, the ranks' start
    # skew after the host barrier (13-24 us on 2x H200, docs/perf.md, Method) adds
    # up to a microsecond to each op of the rank that waits.
    run all_reduce_mid_graph all_reduce "${M[@]}" -n 20 -G 20 -- --coll all_reduce "${M[@]}" -n 100 --graph 20
    run all_reduce_mid all_reduce "${M[@]}" -n 100 -- --coll all_reduce "${M[@]}" -n 100
    run all_reduce_mid_bf16_graph all_reduce "${M[@]}" -d bfloat16 -n 20 -G 20 -- --coll all_reduce "${M[@]}" -n 100 -d bfloat16 --graph 20 ;;
  user)
    U=(-b "${PERF_MIN:-128M}" -e "$MAX" -f 2 -n 20 -w 5)
    for c in ${PERF_COLLS:-all_reduce reduce_scatter broadcast all_gather}; do
      run "${c}_user" "$c" "${U[@]}" -R 1 -- --coll "$c" "${U[@]}"
    done ;;
  *)
    echo "usage: perf.sh [full|quick|reg|regred|huge|mid|user]" >&2
    exit 2 ;;
esac
echo
for f in "$D"/goccl_*.json; do
  name=$(basename "$f" .json); name=${name#goccl_}
  [ -f "$D/nccl_$name.json" ] || continue
  echo "## $name"
  python3 bench/nccl/compare.py "$f" "$D/nccl_$name.json" --out "$D/pairs_$name.json"
  "$B/goccl" plot -o "$D/plot_$name.png" "$f" "$D/nccl_$name.json" >&2 || echo "plot $name failed" >&2
  echo
done | tee "$D/tables.txt"
for f in "$D"/goccl_*.txt; do echo "== $f"; grep -E '^ +[0-9]' "$f" | awk '{print $1, $6, $8, $10, $12}'; done
[ -n "${OUT:-}" ] && tar -C "$(dirname "$D")" -czf "$OUT/perf.tgz" perf
