#!/usr/bin/env bash
# tune.sh: one invocation that checks the kernels under test and sweeps
# the launch shapes and thresholds of GOCCL_TUNE (collectives/gpu/tune.go),
# printing one line per (setting, size) last. Run from the repo root on
# the 2-GPU machine with binaries from scripts/gpu/build.sh (carried as .gpu):
#   bash scripts/gpu/tune.sh [--kernels] [check|large|twoshot|reg|small|cered|direct|blocks|all]...
# --kernels first builds kernels/*.cu (make kernels) and uses that fatbin.
set -u
. "$(dirname "$0")/env.sh" tune
PARTS=()
for a in "$@"; do
  case $a in
    --kernels)
      export PATH=$PATH:/usr/local/cuda/bin
      SECONDS=0
      make kernels >"$LOGS/kernels.log" 2>&1 || { tail -30 "$LOGS/kernels.log"; exit 1; }
      echo "kernels built in ${SECONDS}s"
      export GOCCL_FATBIN=$PWD/kernels/goccl.fatbin
      [ -n "${OUT:-}" ] && cp kernels/goccl.fatbin kernels/manifest.json "$OUT/" ;;
    *) PARTS+=("$a") ;;
  esac
done
[ ${#PARTS[@]} = 0 ] && PARTS=(all)
want() { for p in "${PARTS[@]}"; do [ "$p" = all ] || [ "$p" = "$1" ] && return 0; done; return 1; }

summary=()
# check NAME ENV... -- CONFORMANCE ARGS: a correctness gate, one line.
check() {
  local name=$1 envs=() log="$LOGS/check_$(echo "$1" | tr -c 'A-Za-z0-9' _).log"
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout -k 5 100 "$B/goccl" run -np 2 --timeout 90s "$B/conformance" --backend gpu "$@" >"$log" 2>&1
  local rc=$? line
  line=$(grep 'conformance: all' "$log" | tail -1)
  [ -z "$line" ] && line=$(grep -E 'conformance: rank [0-9]+: [0-9]+ cases' "$log" | head -2 | tr '\n' ' ')
  summary+=("check $name: rc=$rc $line")
  [ $rc != 0 ] && { echo "=== check $name failed"; grep -E 'FAIL|mismatch|error' "$log" | head -10; tail -5 "$log"; failed=1; }
}
failed=0
# sweep NAME ENV... -- BENCH ARGS: one line per size (time us, busbw GB/s).
sweep() {
  local name=$1 envs=() log="$LOGS/sweep_$(echo "$1" | tr -c 'A-Za-z0-9=.,_' _).log"
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout -k 5 60 "$B/goccl" run -np 2 "$B/goccl" bench "$@" --backend gpu -c 0 -a 3 >"$log" 2>&1 \
    || { summary+=("sweep $name: FAILED rc=$?"); tail -5 "$log"; return; }
  while read -r size t bw; do
    summary+=("$(printf '%-44s %10s %9s us %8s GB/s' "$name" "$size" "$t" "$bw")")
  done < <(grep -E '^ +[0-9]+ ' "$log" | awk '{print $1, $6, $8}')
}

if want check; then
  # The LL kernel on every type and op; the default choice (LL, one-shot,
  # copy engines) at every size class; the widest grid with small slots.
  check "ll forced" GOCCL_ALGO=ll -- --colls all_reduce --counts 1,2,3,7,4095,16387,131072 --graph 100 --stress 1000
  check "default choice, large" -- --counts 0,1,7,4095,1048579 --large 64Mi --stress 1000
  check "grid=128,slot=256K" GOCCL_TUNE=grid=128,slot=256K,blockbytes=4K -- --counts 1,7,4095,1048579 --graph 20 --stress 300
  # Timing kernels that give wrong answers (or hang) wastes the call.
  [ $failed = 1 ] && PARTS=(none)
fi
if want large; then
  S=(-b 32M -e 512M -f 4 -n 20 -w 5)
  for c in all_reduce reduce_scatter all_gather broadcast; do
    for t in ${LARGE_TUNE:-grid=96 grid=128 grid=128,slot=64K grid=128,slot=256K}; do
      sweep "$c $t" GOCCL_TUNE=$t -- "$c" "${S[@]}"
    done
  done
fi
if want twoshot; then
  # Two-shot against one-shot at 2 ranks: the same bytes on the link, but
  # two-shot reduces while it pushes the result.
  for g in 20 0; do
    S=(-b 2M -e 32M -f 2 -n 20 -w 5 -G $g)
    [ $g = 0 ] && S=(-b 2M -e 1G -f 4 -n 20 -w 5)
    sweep "ar G=$g twoshot" GOCCL_ALGO=twoshot -- all_reduce "${S[@]}"
    sweep "ar G=$g oneshot" GOCCL_ALGO=oneshot -- all_reduce "${S[@]}"
  done
fi
if want reg; then
  # Registered buffers: the copy engines at every size, to place their
  # thresholds against the kernels' figures above.
  S=(-b 1M -e 512M -f 4 -n 20 -w 5 -R 2)
  for c in broadcast all_gather; do
    sweep "$c ce (registered)" GOCCL_ALGO=ce -- "$c" "${S[@]}"
  done
fi
if want cered; then
  # The copy-engine reductions (collectives/gpu/cereduce.go): correctness
  # first (forced at every size; small staging and chunks so that slots are
  # reused), then chunk and grid sweeps against the kernels on the same
  # registered buffers.
  check "cered forced, registered" GOCCL_ALGO=ce -- --register --colls all_reduce,reduce_scatter --counts 0,1,7,4095,1048579 --large 64Mi --stress 300
  check "cered forced, small staging" GOCCL_ALGO=ce GOCCL_TUNE=slot=4K,cechunk=64K -- --register --colls all_reduce,reduce_scatter --counts 1,7,4095,1048579 --large 16Mi --stress 300
  check "cered forced, unregistered rs" GOCCL_ALGO=ce -- --colls reduce_scatter --counts 1,7,4095,1048579 --large 64Mi --stress 300
  [ $failed = 1 ] && PARTS=(none)
fi
if want cered; then
  S=(-b 16M -e 1G -f 4 -n 10 -w 3 -R 2)
  for c in all_reduce reduce_scatter; do
    base=oneshot
    [ $c = all_reduce ] && base=twoshot
    sweep "$c $base (registered)" GOCCL_ALGO=$base -- "$c" "${S[@]}"
    for t in ${CERED_TUNE:-cechunk=4M cechunk=8M cechunk=16M cechunk=8M,cegrid=64}; do
      sweep "$c ce $t" GOCCL_ALGO=ce GOCCL_TUNE=$t -- "$c" "${S[@]}"
    done
  done
fi
if want direct; then
  # Registered buffers, default choice: the copy engines' direct mode (2
  # ranks, out of place, from the ce.* thresholds), the kernels in place.
  # Correctness first, with small floors and thresholds so that small
  # counts already cut several chunks, in graphs too.
  check "registered, default choice" -- --register --counts 0,1,7,4095,1048579 --large 64Mi --graph 100 --stress 1000
  check "registered, small floors" GOCCL_TUNE=ce.all_reduce=64K,ce.reduce_scatter=64K,cefloor.all_reduce=16K,cefloor.reduce_scatter=4K -- --register --colls all_reduce,reduce_scatter --counts 1,7,4095,1048579 --large 16Mi --stress 300
  [ $failed = 1 ] && PARTS=(none)
fi
if want direct; then
  # DIRECT_SIZES overrides the sizes (nccl-tests' -b -e -f).
  read -r -a S <<<"${DIRECT_SIZES:--b 16M -e 1G -f 4}"
  S+=(-n 10 -w 3 -R 2)
  for c in all_reduce reduce_scatter; do
    sweep "$c kernels (registered)" GOCCL_TUNE=cedirect=0 -- "$c" "${S[@]}"
    for t in ${DIRECT_TUNE:-4M 16M 32M 64M}; do
      sweep "$c direct cefloor=$t" GOCCL_TUNE=ce.$c=0,cefloor.$c=$t -- "$c" "${S[@]}"
    done
  done
fi
if want small; then
  # LL against one-shot where they meet (graph and eager).
  for g in 20 0; do
    S=(-b 128K -e 2M -f 2 -n 20 -w 5 -G $g)
    sweep "ar G=$g ll" GOCCL_ALGO=ll -- all_reduce "${S[@]}"
    sweep "ar G=$g oneshot" GOCCL_ALGO=oneshot -- all_reduce "${S[@]}"
  done
fi
if want blocks; then
  # Launch shapes (the staging's slots follow the grid): every SM of an
  # H200 (132 blocks), two blocks of 256 threads per SM (264), and shares
  # cut to 128-byte lines. Correctness first, then AllReduce in graphs
  # where the one-shot and two-shot serve; BLOCKS_TUNE overrides the
  # shapes.
  for t in grid=132,share=128 grid=264,threads=256,blockbytes=8K; do
    check "$t" GOCCL_TUNE=$t -- --counts 1,7,4095,1048579 --large 16Mi --graph 20 --stress 300
  done
  [ $failed = 1 ] && PARTS=(none)
fi
if want blocks; then
  for t in ${BLOCKS_TUNE:-grid=128 grid=132 grid=132,share=128 grid=264,threads=256,blockbytes=8K}; do
    for d in bfloat16 float; do
      sweep "ar $d G=20 $t" GOCCL_TUNE=$t -- all_reduce -b 2M -e 16M -f 2 -d "$d" -G 20 -n 20 -w 5
    done
    # Eager over 100 ops, as perf.sh mid times it (a rank's start skew
    # weighs on fewer).
    sweep "ar float eager $t" GOCCL_TUNE=$t -- all_reduce -b 8M -e 8M -d float -n 100 -w 5
  done
fi

echo
echo "tune summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
for l in "${summary[@]}"; do echo "$l"; done
[ -n "${OUT:-}" ] && tar -C "$LOGS/.." -czf "$OUT/tune-logs.tgz" tune
exit 0
