//go:build amd64 && !race

package release

import "sync/atomic"

// The stores are assembly: a call the compiler cannot see into keeps it
// from moving the caller's earlier stores after the one here, and the
// MOV itself is ordered after them by the processor (x86-64 keeps stores
// in order). atomic.Uint64 and atomic.Uint32 hold their value at offset
// 0 (their other fields take no space), aligned.

//go:noescape
func storeUint64(p *atomic.Uint64, v uint64)

//go:noescape
func storeUint32(p *atomic.Uint32, v uint32)
