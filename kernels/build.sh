#!/usr/bin/env bash
# build.sh compiles every kernels/*.cu into ONE fatbin (sm_90 and sm_80 SASS,
# compute_90 PTX) and writes kernels/goccl.fatbin and kernels/manifest.json.
# It runs where nvcc exists (the GPU machine): `make kernels`.
# The fatbin of every file and a check of each file on its own are built at
# once (the fatbin is one translation unit, so the checks use the idle
# cores); when a file does not compile it names itself, the fatbin is
# rebuilt from the files that did, and the script exits non-zero.
set -u
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && NVCC="$d/nvcc" && break
  done
fi
command -v "$NVCC" >/dev/null 2>&1 || { echo "build.sh: nvcc not found" >&2; exit 2; }

OUT_FATBIN=${GOCCL_FATBIN_OUT:-goccl.fatbin}
ARCHS="sm_90 sm_80 compute_90"
GENCODE=(-gencode "arch=compute_90,code=[sm_90,compute_90]" -gencode "arch=compute_80,code=sm_80")
FLAGS=(-std=c++17 -O3 -I. --threads 0 -Xfatbin=-compress-all)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sources=$(ls *.cu | sort)
# fatbin NAME FILES...: one translation unit of FILES into $tmp/NAME.
fatbin() {
  local name=$1 f
  shift
  : >"$tmp/$name.cu"
  for f in "$@"; do echo "#include \"$PWD/$f\"" >>"$tmp/$name.cu"; done
  "$NVCC" "${FLAGS[@]}" "${GENCODE[@]}" -fatbin -o "$tmp/$name.fatbin" "$tmp/$name.cu"
}
echo "build.sh: building $OUT_FATBIN from" $sources
fatbin all $sources >"$tmp/all.log" 2>&1 &
allpid=$!
failed=()
pids=()
for f in $sources; do
  for a in sm_90 sm_80; do
    ( "$NVCC" -std=c++17 -O3 -I. -arch=$a -ptx -o "$tmp/${f%.cu}.$a.ptx" "$f" >"$tmp/${f%.cu}.$a.log" 2>&1 \
        || echo "$a" >>"$tmp/${f%.cu}.failed" ) &
    pids+=($!)
  done
done
wait "${pids[@]}" 2>/dev/null
wait $allpid
allrc=$?
good=()
for f in $sources; do
  if [ -e "$tmp/${f%.cu}.failed" ]; then
    echo "build.sh: $f does not compile:" >&2
    for a in $(cat "$tmp/${f%.cu}.failed"); do cat "$tmp/${f%.cu}.$a.log" >&2; done
    failed+=("$f")
  else
    good+=("$f")
  fi
done
if [ ${#failed[@]} -eq 0 ] && [ $allrc -eq 0 ]; then
  cp "$tmp/all.fatbin" "$OUT_FATBIN"
elif [ ${#failed[@]} -eq 0 ]; then
  cat "$tmp/all.log" >&2
  echo "build.sh: fatbin build failed" >&2
  exit 1
else
  echo "build.sh: rebuilding $OUT_FATBIN from ${good[*]}"
  if ! fatbin good "${good[@]}"; then
    echo "build.sh: fatbin build failed" >&2
    exit 1
  fi
  cp "$tmp/good.fatbin" "$OUT_FATBIN"
fi

nvccver=$("$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -1)
{
  echo "{"
  echo "  \"nvcc\": \"$nvccver\","
  echo "  \"archs\": \"$ARCHS\","
  echo "  \"fatbin_sha256\": \"$(sha256sum "$OUT_FATBIN" | cut -d' ' -f1)\","
  echo "  \"fatbin_bytes\": $(stat -c %s "$OUT_FATBIN"),"
  echo "  \"sources\": {"
  first=1
  for f in $(ls *.cu *.cuh build.sh | sort); do
    [ $first = 1 ] || echo ","
    first=0
    printf '    "%s": "%s"' "$f" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
  echo ""
  echo "  }"
  echo "}"
} >manifest.json
echo "build.sh: wrote $OUT_FATBIN ($(stat -c %s "$OUT_FATBIN") bytes) and manifest.json"
if [ ${#failed[@]} -gt 0 ]; then
  echo "build.sh: FAILED: ${failed[*]} (left out of the fatbin)" >&2
  exit 1
fi
