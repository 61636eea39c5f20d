# env.sh: sourced first by every GPU script here (suite, tune, perf, ab).
# NVLink multicast stays off on the project's GPU machines (DESIGN §8): in NCCL,
# PyTorch and NVSHMEM, and in goccl, whatever the caller's environment
# says. B is where scripts/gpu/build.sh's binaries are; LOGS (under $OUT
# when that is set) takes each script's logs in folder $1.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset GOCCL_NVLS_ENABLE
B=${GOCCL_GPU_BIN:-.gpu}
LOGS=${OUT:-/tmp}/$1
mkdir -p "$LOGS"
