//go:build cgo

package main

import (
	"errors"
	"sync"
)

// clique is the communicators one thread formed together: the ranks of an
// ncclCommInitAll, or the blocking inits of one group. NCCL's
// ncclCommDestroy is local, and its users destroy such communicators one
// after the other from that one thread (nccl-tests with -g/-t, every
// InitAll program); goccl's Close is collective on a healthy communicator
// (peers unmap each other's memory), so closing the first would wait for
// ranks the same thread has not destroyed yet. So the clique's closes are
// held until every member was destroyed or finalized, and then run
// together.
type clique struct {
	mu      sync.Mutex
	live    int
	waiting []*commHandle
}

func newClique(hs []*commHandle) {
	if len(hs) < 2 {
		return
	}
	cl := &clique{live: len(hs)}
	for _, h := range hs {
		h.clique = cl
	}
}

// release asks for h's communicator to be closed and returns what can be
// closed now: h alone outside a clique or when now is set (an aborted
// communicator does not wait for its peers), else nothing until the last
// member's release, which returns every member held.
func (h *commHandle) release(now bool) []*commHandle {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	cl := h.clique
	if cl == nil {
		return []*commHandle{h}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.live--
	var out []*commHandle
	if now {
		out = append(out, h)
	} else {
		cl.waiting = append(cl.waiting, h)
	}
	if cl.live == 0 {
		out = append(out, cl.waiting...)
		cl.waiting = nil
	}
	return out
}

// close marks h dead, once calls in progress on it returned, and closes
// its communicator.
func (h *commHandle) close() error {
	h.mu.Lock()
	h.dead = true
	h.mu.Unlock()
	h.cancel()
	if h.c == nil {
		return nil
	}
	return h.c.Close()
}

// closeAll closes hs concurrently (they may wait for each other).
func closeAll(hs []*commHandle) error {
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0].close()
	}
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
