//go:build cgo

package main

import (
	"sync"
	"sync/atomic"
)

// Handles given to C are ids in a registry, never Go pointers (cgo's rules
// forbid C keeping them): a handle value is handleBase + id<<4 | tag, so
// that handles of different kinds, NULL and garbage are told apart without
// dereferencing anything. Ids are never reused, so a destroyed handle stays
// invalid.
const (
	handleBase = uintptr(1) << 44
	tagComm    = 0xc
	tagReg     = 0x8
	tagWindow  = 0x4

	regChunkBits = 12
	regChunk     = 1 << regChunkBits
	regChunks    = 1 << 12 // 16M ids of each kind over the process's life
)

// registry maps ids to values with lock-free lookups (the hot path reads
// two atomic pointers).
type registry[T any] struct {
	tag    uintptr
	mu     sync.Mutex
	next   uint64
	chunks [regChunks]atomic.Pointer[[regChunk]atomic.Pointer[T]]
}

// add stores v and returns its handle; 0 when the registry is full.
func (r *registry[T]) add(v *T) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	id := r.next
	ci := id >> regChunkBits
	if ci >= regChunks {
		return 0
	}
	ch := r.chunks[ci].Load()
	if ch == nil {
		ch = new([regChunk]atomic.Pointer[T])
		r.chunks[ci].Store(ch)
	}
	ch[id&(regChunk-1)].Store(v)
	return handleBase + uintptr(id)<<4 | r.tag
}

func (r *registry[T]) slot(h uintptr) *atomic.Pointer[T] {
	if h < handleBase || h&0xf != r.tag {
		return nil
	}
	id := uint64((h - handleBase) >> 4)
	ci := id >> regChunkBits
	if ci >= regChunks {
		return nil
	}
	ch := r.chunks[ci].Load()
	if ch == nil {
		return nil
	}
	return &ch[id&(regChunk-1)]
}

// get returns the value of handle h, nil for a handle that is not live.
func (r *registry[T]) get(h uintptr) *T {
	if s := r.slot(h); s != nil {
		return s.Load()
	}
	return nil
}

// take removes h and returns its value (nil when it was not live), so
// that of two threads destroying one handle only one gets it.
func (r *registry[T]) take(h uintptr) *T {
	if s := r.slot(h); s != nil {
		return s.Swap(nil)
	}
	return nil
}
