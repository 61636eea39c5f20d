package release

import "sync/atomic"

// Uint64 stores v into *p with release ordering.
func Uint64(p *atomic.Uint64, v uint64) { storeUint64(p, v) }

// Uint32 stores v into *p with release ordering.
func Uint32(p *atomic.Uint32, v uint32) { storeUint32(p, v) }
