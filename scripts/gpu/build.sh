#!/usr/bin/env bash
# build.sh (runs HERE, where Go is): builds every binary the GPU suite runs
# into .gpu/ (git-ignored), to be carried to the GPU machine:
#   scripts/gpu/build.sh [--slim]   then, with .gpu copied to the GPU machine, run
#   bash scripts/gpu/suite.sh [--kernels]
# --slim leaves the fatbin out of the binaries (and of build/lib's
# libnccl.so.2, built too), so that they travel in a third of the bytes;
# run them with GOCCL_FATBIN=kernels/goccl.fatbin.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu
if [ "${1:-}" = --slim ]; then
  keep=$(mktemp)
  cp kernels/goccl.fatbin "$keep"
  trap 'cp "$keep" kernels/goccl.fatbin; rm -f "$keep"' EXIT
  : >kernels/goccl.fatbin
  make libnccl >/dev/null
fi
go build -ldflags="-s -w" -o .gpu/goccl ./cmd/goccl
go build -ldflags="-s -w" -o .gpu/conformance ./tests/conformance
go build -ldflags="-s -w" -o .gpu/gradavg ./examples/gradavg
go build -ldflags="-s -w" -o .gpu/gpufaults ./tests/gpufaults
go build -ldflags="-s -w" -o .gpu/p2pgpu ./tests/p2pgpu
go test -c -ldflags="-s -w" -o .gpu/cuda.test ./internal/cuda
go test -c -ldflags="-s -w" -o .gpu/gpu.test ./collectives/gpu
for p in uva ipc vmm; do
  go test -c -ldflags="-s -w" -o .gpu/$p.test ./transport/$p
done
ls -la .gpu
