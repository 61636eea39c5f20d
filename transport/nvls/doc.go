// Package nvls builds NVSwitch multicast teams (NVLS) over VMM memory: one
// multicast object shared by every local rank, each rank's memory bound
// into it, and both the multicast and the rank's own (unicast) view mapped.
// The multimem kernels in kernels/nvls.cu run on such a team.
//
// It is used only when Gate is open (GOCCL_NVLS_ENABLE=1 and no
// NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 or
// NVSHMEM_DISABLE_NVLS=1) and Eligible agrees on every rank. Setup checks
// the gate again itself before any multicast call. On the project's
// GPU machines nothing here is ever executed (DESIGN §8); it is tested
// against a fake driver. See docs/nvls.md.
package nvls
