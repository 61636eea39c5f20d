//go:build !amd64 || race

package release

import "sync/atomic"

func storeUint64(p *atomic.Uint64, v uint64) { p.Store(v) }

func storeUint32(p *atomic.Uint32, v uint32) { p.Store(v) }
