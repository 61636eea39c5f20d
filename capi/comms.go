//go:build cgo

package main

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/comm"
)

// commHandle is one ncclComm_t. Its communicator may still be forming
// (non-blocking init, an init inside a group): ready closes when it is
// formed or failed.
type commHandle struct {
	ready    chan struct{}
	formed   atomic.Bool // ready is closed: c and err are set
	c        *comm.Comm
	err      error
	blocking bool
	cancel   context.CancelFunc // ends an init in progress (ncclCommAbort)

	// Calls hold mu shared; destroy takes it alone, so that it closes the
	// communicator only once calls in progress (woken by an abort) return.
	mu   sync.RWMutex
	dead bool

	orphan   bool        // no handle was given out (a split's NCCL_SPLIT_NOCOLOR)
	clique   *clique     // the ranks formed with it by one thread, if any
	released atomic.Bool // finalized or destroyed: its close was asked for

	// Window registrations are collective: every rank must make them in
	// the same order, also those a group runs in the background. winTail
	// is the last one started; each waits for the one before it.
	winMu   sync.Mutex
	winTail chan struct{}
}

var comms = registry[commHandle]{tag: tagComm}

// startComm registers a handle whose communicator init builds in the
// background.
func startComm(blocking bool, init func(ctx context.Context) (*comm.Comm, error)) (*commHandle, uintptr) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &commHandle{ready: make(chan struct{}), blocking: blocking, cancel: cancel}
	go func() {
		c, err := init(ctx)
		h.c, h.err = c, err
		h.formed.Store(true)
		close(h.ready)
	}()
	return h, comms.add(h)
}

func (h *commHandle) wait() {
	if !h.formed.Load() {
		<-h.ready
	}
}

var loggedOnce sync.Once

func logLibrary() {
	loggedOnce.Do(func() {
		logger.Info("goccl: NCCL C API library", "library", "libnccl.so.2", "name", C.GOCCL_LIB_NAME,
			"version", C.GOCCL_LIB_VERSION, "api", C.GOCCL_API_NAME, "ncclGetVersion", 22800)
	})
}

// lookup finds the live communicator of handle hc for a call named fn;
// on success the caller holds h.mu shared and must release it.
func lookup(fn string, hc C.uintptr_t) (*commHandle, *comm.Comm, C.int) {
	h := comms.get(uintptr(hc))
	if h == nil {
		if hc == 0 {
			return nil, nil, invalidArg(fn, "comm is NULL")
		}
		return nil, nil, invalidArg(fn, "comm %#x is not a live communicator of this library (destroyed, or never created)", uintptr(hc))
	}
	h.wait()
	if h.err != nil {
		return nil, nil, fail(fn, fmt.Errorf("%w: the communicator's init failed: %w", errUsage, h.err))
	}
	h.mu.RLock()
	if h.dead || h.c == nil {
		h.mu.RUnlock()
		return nil, nil, fail(fn, fmt.Errorf("%w: the communicator is being destroyed", errUsage))
	}
	return h, h.c, ncclSuccess
}

// goccl_get_unique_id is ncclGetUniqueId: a fresh id into out.
//
//export goccl_get_unique_id
func goccl_get_unique_id(out *C.char) C.int {
	id, err := comm.NewUniqueID()
	if err != nil {
		return fail("ncclGetUniqueId", err)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), comm.UniqueIDBytes)
	copy(dst, id[:])
	return ncclSuccess
}

// opts are the options of a communicator on device dev (-1: goccl picks,
// as for the host backend).
func opts(dev int) comm.Options {
	var o comm.Options
	if dev >= 0 {
		o.Device = comm.Device(dev)
	}
	return o
}

// goccl_comm_init is ncclCommInitRank and its variants (fnC names which):
// rank's communicator of nranks from the first of the ids.
//
//export goccl_comm_init
func goccl_comm_init(fnC *C.char, out *C.uintptr_t, nranks C.int, ids *C.char, nid C.int, rank C.int, dev C.int, blocking C.int, gid C.uint64_t) C.int {
	fn := C.GoString(fnC)
	logLibrary()
	if ids == nil {
		return invalidArg(fn, "commId is NULL")
	}
	if nranks < 1 {
		return invalidArg(fn, "nranks = %d, want at least 1", int(nranks))
	}
	if rank < 0 || rank >= nranks {
		return invalidArg(fn, "rank = %d not in [0, nranks = %d)", int(rank), int(nranks))
	}
	// Every rank is given the same ids; goccl's bootstrap needs one, so
	// the first serves and the others are not read.
	id, err := comm.UniqueIDFromBytes(C.GoBytes(unsafe.Pointer(ids), comm.UniqueIDBytes))
	if err != nil {
		return fail(fn, fmt.Errorf("%w: commId: %w", comm.ErrInvalidArgument, err))
	}
	_ = nid
	o := opts(int(dev))
	n, r := int(nranks), int(rank)
	h, hv := startComm(blocking != 0, func(ctx context.Context) (*comm.Comm, error) {
		return comm.InitRank(ctx, id, n, r, o)
	})
	if hv == 0 {
		h.cancel()
		return fail(fn, fmt.Errorf("%w: too many communicators created in this process", errUsage))
	}
	return settle(fn, h, hv, out, gid)
}

// settle finishes an init call: inside a group the group's end waits for
// it; a non-blocking one reports ncclInProgress; a blocking one waits and
// on failure leaves no handle behind.
func settle(fn string, h *commHandle, hv uintptr, out *C.uintptr_t, gid C.uint64_t) C.int {
	if gid != 0 {
		*out = C.uintptr_t(hv)
		groupOf(gid).pending = append(groupOf(gid).pending, h)
		return ncclSuccess
	}
	if !h.blocking {
		*out = C.uintptr_t(hv)
		if !h.formed.Load() {
			return ncclInProgress
		}
		if h.err != nil {
			return fail(fn, h.err)
		}
		return ncclSuccess
	}
	h.wait()
	if h.err != nil {
		comms.take(hv)
		*out = 0
		return fail(fn, h.err)
	}
	*out = C.uintptr_t(hv)
	return ncclSuccess
}

// goccl_comm_init_all is ncclCommInitAll: one communicator per device of
// devlist (0..ndev-1 when NULL), formed in this process.
//
//export goccl_comm_init_all
func goccl_comm_init_all(out *C.uintptr_t, ndev C.int, devlist *C.int) C.int {
	const fn = "ncclCommInitAll"
	logLibrary()
	devs := make([]int, int(ndev))
	var list []C.int
	if devlist != nil {
		list = unsafe.Slice(devlist, int(ndev))
	}
	for i := range devs {
		devs[i] = i
		if list != nil {
			if list[i] < 0 {
				return invalidArg(fn, "devlist[%d] = %d", i, int(list[i]))
			}
			devs[i] = int(list[i])
		}
	}
	cs, err := comm.InitAll(context.Background(), devs, comm.Options{})
	if err != nil {
		return fail(fn, err)
	}
	outs := unsafe.Slice(out, int(ndev))
	hs := make([]*commHandle, len(cs))
	for i, c := range cs {
		h := &commHandle{ready: make(chan struct{}), c: c, blocking: true, cancel: func() {}}
		h.formed.Store(true)
		close(h.ready)
		hs[i] = h
		outs[i] = C.uintptr_t(comms.add(h))
	}
	newClique(hs)
	return ncclSuccess
}

// parentOf waits for parent's communicator for split and shrink; the
// shared hold is released at once (the child's init runs on its own).
func parentOf(fn string, hc C.uintptr_t) (*commHandle, *comm.Comm, C.int) {
	h, c, code := lookup(fn, hc)
	if code != ncclSuccess {
		return nil, nil, code
	}
	h.mu.RUnlock()
	return h, c, ncclSuccess
}

// goccl_comm_split is ncclCommSplit: a child of the ranks that give the same
// color, ordered by key.
//
//export goccl_comm_split
func goccl_comm_split(hc C.uintptr_t, color, key C.int, out *C.uintptr_t, blocking C.int, gid C.uint64_t) C.int {
	const fn = "ncclCommSplit"
	ph, parent, code := parentOf(fn, hc)
	if code != ncclSuccess {
		return code
	}
	if color < 0 && color != C.int(comm.NoColor) {
		return invalidArg(fn, "color = %d, want >= 0 or NCCL_SPLIT_NOCOLOR", int(color))
	}
	b := ph.blocking
	if blocking >= 0 {
		b = blocking != 0
	}
	o := opts(parent.Device())
	col, k := int(color), int(key)
	h, hv := startComm(b, func(ctx context.Context) (*comm.Comm, error) {
		return parent.Split(ctx, col, k, o)
	})
	if col == comm.NoColor {
		// This rank joins no communicator, yet takes part in the split.
		comms.take(hv)
		h.orphan = true
		*out = 0
		if gid != 0 {
			groupOf(gid).pending = append(groupOf(gid).pending, h)
			return ncclSuccess
		}
		h.wait()
		if h.err != nil {
			return fail(fn, h.err)
		}
		return ncclSuccess
	}
	return settle(fn, h, hv, out, gid)
}

// goccl_comm_shrink is ncclCommShrink: a child without the excluded ranks;
// flags 1 (NCCL_SHRINK_ABORT) aborts the parent first.
//
//export goccl_comm_shrink
func goccl_comm_shrink(hc C.uintptr_t, exclude *C.int, nexclude C.int, out *C.uintptr_t, blocking, flags C.int, gid C.uint64_t) C.int {
	const fn = "ncclCommShrink"
	h := comms.get(uintptr(hc))
	if h == nil {
		return invalidArg(fn, "comm %#x is not a live communicator of this library", uintptr(hc))
	}
	h.wait()
	if h.err != nil || h.c == nil {
		return fail(fn, fmt.Errorf("%w: the communicator's init failed: %v", errUsage, h.err))
	}
	parent := h.c
	ex := make([]int, int(nexclude))
	if nexclude > 0 {
		for i, r := range unsafe.Slice(exclude, int(nexclude)) {
			if r < 0 || int(r) >= parent.Size() {
				return invalidArg(fn, "excludeRanksList[%d] = %d not in [0, %d)", i, int(r), parent.Size())
			}
			ex[i] = int(r)
		}
	}
	if flags == 1 { // NCCL_SHRINK_ABORT: stop what the parent is doing first
		parent.Abort(errors.New("ncclCommShrink with NCCL_SHRINK_ABORT"))
	}
	b := h.blocking
	if blocking >= 0 {
		b = blocking != 0
	}
	o := opts(parent.Device())
	nh, hv := startComm(b, func(ctx context.Context) (*comm.Comm, error) {
		return parent.Shrink(ctx, ex, o)
	})
	return settle(fn, nh, hv, out, gid)
}

// goccl_comm_finalize is ncclCommFinalize: it releases the communicator
// (goccl's Close waits for the peers); destroy then frees the handle.
//
//export goccl_comm_finalize
func goccl_comm_finalize(hc C.uintptr_t) C.int {
	const fn = "ncclCommFinalize"
	h, _, code := lookup(fn, hc)
	if code != ncclSuccess {
		return code
	}
	h.mu.RUnlock()
	// Close waits for the peers (goccl's Close is collective on a healthy
	// communicator); ncclCommDestroy then frees the handle only.
	if err := closeAll(h.release(false)); err != nil {
		return fail(fn, err)
	}
	return ncclSuccess
}

// goccl_comm_destroy is ncclCommDestroy, or ncclCommAbort when abort is not
// 0 (an init in progress is cancelled and the communicator aborted first):
// it releases the communicator and frees the handle.
//
//export goccl_comm_destroy
func goccl_comm_destroy(hc C.uintptr_t, abort C.int) C.int {
	fn := "ncclCommDestroy"
	if abort != 0 {
		fn = "ncclCommAbort"
	}
	h := comms.take(uintptr(hc))
	if h == nil {
		return invalidArg(fn, "comm %#x is not a live communicator of this library (destroyed twice?)", uintptr(hc))
	}
	if abort != 0 {
		h.cancel() // an init in progress stops
	}
	h.wait()
	if abort != 0 && h.c != nil {
		// Wakes every call in progress on it, on any thread.
		h.c.Abort(errors.New("ncclCommAbort"))
	}
	if err := closeAll(h.release(abort != 0)); err != nil && abort == 0 {
		return fail(fn, err)
	}
	return ncclSuccess
}

// goccl_comm_async_error is ncclCommGetAsyncError: ncclInProgress while the
// init runs, then the init's or the communicator's error.
//
//export goccl_comm_async_error
func goccl_comm_async_error(hc C.uintptr_t, out *C.int) C.int {
	const fn = "ncclCommGetAsyncError"
	h := comms.get(uintptr(hc))
	if h == nil {
		return invalidArg(fn, "comm %#x is not a live communicator of this library", uintptr(hc))
	}
	if !h.formed.Load() {
		*out = ncclInProgress
		return ncclSuccess
	}
	if h.err != nil {
		*out = fail(fn, h.err)
		return ncclSuccess
	}
	err := h.c.Err()
	if err == nil || errors.Is(err, comm.ErrClosed) {
		*out = ncclSuccess
		return ncclSuccess
	}
	*out = fail(fn, err)
	return ncclSuccess
}

// goccl_comm_query answers ncclCommCount, ncclCommCuDevice and
// ncclCommUserRank (fnC names which).
//
//export goccl_comm_query
func goccl_comm_query(fnC *C.char, hc C.uintptr_t, what C.int, out *C.int) C.int {
	h, c, code := lookup(C.GoString(fnC), hc)
	if code != ncclSuccess {
		return code
	}
	defer h.mu.RUnlock()
	switch what {
	case C.GOCCL_QUERY_COUNT:
		*out = C.int(c.Size())
	case C.GOCCL_QUERY_DEVICE:
		*out = C.int(c.Device())
	case C.GOCCL_QUERY_RANK:
		*out = C.int(c.Rank())
	}
	return ncclSuccess
}

// count converts a size_t count; NCCL's counts are unsigned, goccl's int.
func count(fn string, n C.size_t) (int, C.int) {
	if uint64(n) > math.MaxInt64 {
		return 0, invalidArg(fn, "count = %d is too large", uint64(n))
	}
	return int(n), ncclSuccess
}
