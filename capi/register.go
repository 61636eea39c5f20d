//go:build cgo

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/goccl/goccl/comm"
)

// regHandle is one ncclCommRegister. NCCL's registration is local (each
// rank on its own, whenever it likes) while goccl's is collective, so it
// cannot map onto comm.Register without risking a rank waiting for peers
// that never register. It is a hint in NCCL too: collectives on the buffer
// are correct without it. So it is recorded and checked, and goccl's
// zero-copy path is reached through ncclCommWindowRegister (collective in
// NCCL as in goccl).
type regHandle struct {
	comm uintptr
	ptr  uintptr
	size uint64
}

var regs = registry[regHandle]{tag: tagReg}

// lookupRegion is what both registrations check first: a live
// communicator (its read lock released, as a registration outlives the
// call) and a buffer that is not NULL nor empty.
func lookupRegion(fn string, hc, buf C.uintptr_t, size C.size_t) (*commHandle, *comm.Comm, C.int) {
	h, c, code := lookup(fn, hc)
	if code != ncclSuccess {
		return nil, nil, code
	}
	h.mu.RUnlock()
	if buf == 0 {
		return nil, nil, invalidArg(fn, "buff is NULL")
	}
	if size == 0 {
		return nil, nil, invalidArg(fn, "size is 0")
	}
	return h, c, ncclSuccess
}

// goccl_register is ncclCommRegister: a handle only, nothing is registered
// with the communicator.
//
//export goccl_register
func goccl_register(hc, buf C.uintptr_t, size C.size_t, out *C.uintptr_t) C.int {
	const fn = "ncclCommRegister"
	if _, _, code := lookupRegion(fn, hc, buf, size); code != ncclSuccess {
		return code
	}
	*out = C.uintptr_t(regs.add(&regHandle{comm: uintptr(hc), ptr: uintptr(buf), size: uint64(size)}))
	return ncclSuccess
}

// goccl_deregister is ncclCommDeregister: it frees a goccl_register handle.
//
//export goccl_deregister
func goccl_deregister(hc, handle C.uintptr_t) C.int {
	const fn = "ncclCommDeregister"
	r := regs.get(uintptr(handle))
	if r == nil {
		return invalidArg(fn, "handle %#x is not a live registration", uintptr(handle))
	}
	if r.comm != uintptr(hc) {
		return invalidArg(fn, "handle %#x was registered with another communicator", uintptr(handle))
	}
	regs.take(uintptr(handle))
	return ncclSuccess
}

// winHandle is one ncclCommWindowRegister: goccl's collective Register,
// made in the background when called inside a group (whose end waits).
type winHandle struct {
	comm  uintptr
	ready chan struct{}
	reg   comm.Registration // nil when the backend registers nothing
	err   error
}

var windows = registry[winHandle]{tag: tagWindow}

// goccl_window_register is ncclCommWindowRegister: a collective Register of
// the buffer, awaited by the group's end inside a group.
//
//export goccl_window_register
func goccl_window_register(hc, buf C.uintptr_t, size C.size_t, out *C.uintptr_t, gid C.uint64_t) C.int {
	const fn = "ncclCommWindowRegister"
	h, c, code := lookupRegion(fn, hc, buf, size)
	if code != ncclSuccess {
		return code
	}
	w := &winHandle{comm: uintptr(hc), ready: make(chan struct{})}
	h.winMu.Lock()
	prev := h.winTail
	h.winTail = w.ready
	h.winMu.Unlock()
	go func() {
		defer close(w.ready)
		if prev != nil {
			<-prev // in call order: goccl's Register is collective
		}
		reg, err := c.Register(bg, uintptr(buf), uint64(size))
		if errors.Is(err, comm.ErrNotSupported) {
			// The backend (host memory) has no zero-copy path: the window
			// is a plain buffer, which every collective accepts, as NCCL
			// does where symmetric memory is not available.
			logger.Info("goccl: ncclCommWindowRegister: backend registers nothing; the window is a plain buffer", "rank", c.Rank(), "backend", c.BackendName())
			err = nil
		}
		w.reg, w.err = reg, err
	}()
	hv := windows.add(w)
	if gid != 0 {
		*out = C.uintptr_t(hv)
		g := groupOf(gid)
		g.windows = append(g.windows, w)
		return ncclSuccess
	}
	<-w.ready
	if w.err != nil {
		windows.take(hv)
		return fail(fn, w.err)
	}
	*out = C.uintptr_t(hv)
	return ncclSuccess
}

// goccl_window_deregister is ncclCommWindowDeregister: it waits for the
// registration and releases it.
//
//export goccl_window_deregister
func goccl_window_deregister(hc, win C.uintptr_t) C.int {
	const fn = "ncclCommWindowDeregister"
	w := windows.get(uintptr(win))
	if w == nil {
		return invalidArg(fn, "win %#x is not a live window", uintptr(win))
	}
	if w.comm != uintptr(hc) {
		return invalidArg(fn, "win %#x belongs to another communicator", uintptr(win))
	}
	windows.take(uintptr(win))
	<-w.ready
	if w.reg == nil {
		return ncclSuccess
	}
	if err := w.reg.Close(bg); err != nil {
		return fail(fn, fmt.Errorf("closing the registration: %w", err))
	}
	return ncclSuccess
}
