package nvls

import "encoding/binary"

// Kernel launch limits shared with kernels/nvls.cu.
const (
	KernelThreads   = 512 // threads per block
	KernelMaxBlocks = 128 // barrier flags per team; blocks past it do nothing
	// FlagBytes is the size of the barrier flag array (u32 per block) the
	// kernels expect at Params.MCFlags/UCFlags, zeroed before first use on
	// every rank, and of the epoch array at Params.Epochs.
	FlagBytes = 4 * KernelMaxBlocks
	// KernelParamsSize is sizeof(goccl_nvls::Params).
	KernelParamsSize = 88
)

// KernelParams mirrors goccl_nvls::Params in kernels/nvls.cu, the one
// by-value parameter of every goccl_nvls_* kernel. Addresses are device
// addresses as seen by this rank.
type KernelParams struct {
	MC        uint64 // multicast address of the data area
	Src       uint64 // local input (allgather, broadcast root)
	Dst       uint64 // local output (reducescatter)
	Bytes     uint64 // allreduce/broadcast: total; reducescatter/allgather: per rank
	Stride    uint64 // bytes between ranks' blocks in the data area, multiple of 16
	MCFlags   uint64 // multicast address of the barrier flags
	UCFlags   uint64 // this rank's unicast address of the same flags
	Epochs    uint64 // this rank's barrier epochs (local device memory)
	AbortFlag uint64 // u32 in host-pinned mapped memory; 0 for none
	Rank      int32
	NRanks    int32
	Root      int32
}

// Put writes p in the kernel's layout into b (at least KernelParamsSize
// bytes) without allocating, for cuLaunchKernel's parameter buffer.
func (p *KernelParams) Put(b []byte) {
	_ = b[KernelParamsSize-1]
	le := binary.LittleEndian
	for i, v := range [...]uint64{p.MC, p.Src, p.Dst, p.Bytes, p.Stride, p.MCFlags, p.UCFlags, p.Epochs, p.AbortFlag} {
		le.PutUint64(b[8*i:], v)
	}
	le.PutUint32(b[72:], uint32(p.Rank))
	le.PutUint32(b[76:], uint32(p.NRanks))
	le.PutUint32(b[80:], uint32(p.Root))
	le.PutUint32(b[84:], 0)
}
