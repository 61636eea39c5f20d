//go:build cgo

package main

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/comm"
)

// callNames are the NCCL functions behind goccl_call's kinds, for errors.
var callNames = [...]string{
	C.GOCCL_CALL_ALLREDUCE:     "ncclAllReduce",
	C.GOCCL_CALL_BROADCAST:     "ncclBroadcast",
	C.GOCCL_CALL_REDUCE:        "ncclReduce",
	C.GOCCL_CALL_ALLGATHER:     "ncclAllGather",
	C.GOCCL_CALL_REDUCESCATTER: "ncclReduceScatter",
	C.GOCCL_CALL_ALLTOALL:      "ncclAlltoAll",
	C.GOCCL_CALL_GATHER:        "ncclGather",
	C.GOCCL_CALL_SCATTER:       "ncclScatter",
	C.GOCCL_CALL_SEND:          "ncclSend",
	C.GOCCL_CALL_RECV:          "ncclRecv",
}

// bg is every call's context: NCCL's calls have no deadline; goccl's own
// timeouts and aborts end their waits.
var bg = context.Background()

// goccl_call runs one collective or Send/Recv for the C shim, or records it
// in group gid when gid is not 0.
//
//export goccl_call
func goccl_call(gid C.uint64_t, kind C.int, send, recv C.uintptr_t, n C.size_t, dt, op, root C.int, hc, stream C.uintptr_t) C.int {
	fn := callNames[kind]
	h, c, code := lookup(fn, hc)
	if code != ncclSuccess {
		if gid != 0 {
			groupOf(gid).failed(code)
		}
		return code
	}
	defer h.mu.RUnlock()
	cnt, code := count(fn, n)
	if code != ncclSuccess {
		if gid != 0 {
			groupOf(gid).failed(code)
		}
		return code
	}
	s, r, st := uintptr(send), uintptr(recv), uintptr(stream)
	d, o, rt := comm.DataType(dt), comm.Op(op), int(root)
	var err error
	if gid != 0 {
		err = groupOf(gid).record(kind, c, s, r, cnt, d, o, rt, st)
	} else {
		switch kind {
		case C.GOCCL_CALL_ALLREDUCE:
			err = c.AllReduce(bg, s, r, cnt, d, o, st)
		case C.GOCCL_CALL_BROADCAST:
			err = c.Broadcast(bg, s, r, cnt, d, rt, st)
		case C.GOCCL_CALL_REDUCE:
			err = c.Reduce(bg, s, r, cnt, d, o, rt, st)
		case C.GOCCL_CALL_ALLGATHER:
			err = c.AllGather(bg, s, r, cnt, d, st)
		case C.GOCCL_CALL_REDUCESCATTER:
			err = c.ReduceScatter(bg, s, r, cnt, d, o, st)
		case C.GOCCL_CALL_ALLTOALL:
			err = c.AllToAll(bg, s, r, cnt, d, st)
		case C.GOCCL_CALL_GATHER:
			err = c.Gather(bg, s, r, cnt, d, rt, st)
		case C.GOCCL_CALL_SCATTER:
			err = c.Scatter(bg, s, r, cnt, d, rt, st)
		case C.GOCCL_CALL_SEND:
			err = c.Send(bg, s, cnt, d, rt, st)
		case C.GOCCL_CALL_RECV:
			err = c.Recv(bg, r, cnt, d, rt, st)
		}
	}
	if err != nil {
		code := fail(fn, err)
		if gid != 0 {
			groupOf(gid).failed(code)
		}
		return code
	}
	return ncclSuccess
}

// group is one thread's ncclGroupStart/End: the calls it records, the
// inits and window registrations started inside it, which its end waits
// for, and the first failure of a call that never reached the recording.
type group struct {
	g       *comm.Group
	pending []*commHandle
	windows []*winHandle
	code    C.int
}

var groups = registry[group]{tag: 0}

// goccl_group_new starts a thread's ncclGroupStart/End group and gives its
// id.
//
//export goccl_group_new
func goccl_group_new() C.uint64_t {
	return C.uint64_t(groups.add(&group{g: comm.NewGroup()}))
}

// groupOf is the group of id gid (a thread's, from goccl_group_new).
func groupOf(gid C.uint64_t) *group { return groups.get(uintptr(gid)) }

// goccl_group_failed records a call of the thread's group that failed
// before reaching the Go side (or on it), so that the group's end reports
// it as NCCL's does.
//
//export goccl_group_failed
func goccl_group_failed(gid C.uint64_t, code C.int) {
	if g := groupOf(gid); g != nil {
		g.failed(code)
	}
}

func (g *group) failed(code C.int) {
	if g.code == ncclSuccess {
		g.code = code
	}
}

// record adds one call. The collectives NCCL builds from point-to-point
// calls (AlltoAll, Gather, Scatter) are recorded as those calls, as NCCL
// itself defines them, so that they fuse with the group's other calls.
func (g *group) record(kind C.int, c *comm.Comm, s, r uintptr, n int, dt comm.DataType, op comm.Op, root int, st uintptr) error {
	gr := g.g
	es := uintptr(n) * uintptr(dt.Size())
	checkRoot := func(name string) error {
		if root < 0 || root >= c.Size() {
			return fmt.Errorf("goccl: rank %d: %s: root %d not in [0,%d): %w", c.Rank(), name, root, c.Size(), comm.ErrInvalidArgument)
		}
		return nil
	}
	switch kind {
	case C.GOCCL_CALL_ALLREDUCE:
		return gr.AllReduce(c, s, r, n, dt, op, st)
	case C.GOCCL_CALL_BROADCAST:
		return gr.Broadcast(c, s, r, n, dt, root, st)
	case C.GOCCL_CALL_REDUCE:
		return gr.Reduce(c, s, r, n, dt, op, root, st)
	case C.GOCCL_CALL_ALLGATHER:
		return gr.AllGather(c, s, r, n, dt, st)
	case C.GOCCL_CALL_REDUCESCATTER:
		return gr.ReduceScatter(c, s, r, n, dt, op, st)
	case C.GOCCL_CALL_SEND:
		return gr.Send(c, s, n, dt, root, st)
	case C.GOCCL_CALL_RECV:
		return gr.Recv(c, r, n, dt, root, st)
	case C.GOCCL_CALL_ALLTOALL:
		for p := 0; p < c.Size(); p++ {
			if err := gr.Send(c, s+uintptr(p)*es, n, dt, p, st); err != nil {
				return err
			}
			if err := gr.Recv(c, r+uintptr(p)*es, n, dt, p, st); err != nil {
				return err
			}
		}
	case C.GOCCL_CALL_GATHER:
		if err := checkRoot("Gather"); err != nil {
			return err
		}
		if err := gr.Send(c, s, n, dt, root, st); err != nil {
			return err
		}
		if c.Rank() == root {
			for p := 0; p < c.Size(); p++ {
				if err := gr.Recv(c, r+uintptr(p)*es, n, dt, p, st); err != nil {
					return err
				}
			}
		}
	case C.GOCCL_CALL_SCATTER:
		if err := checkRoot("Scatter"); err != nil {
			return err
		}
		if c.Rank() == root {
			for p := 0; p < c.Size(); p++ {
				if err := gr.Send(c, s+uintptr(p)*es, n, dt, p, st); err != nil {
					return err
				}
			}
		}
		return gr.Recv(c, r, n, dt, root, st)
	}
	return nil
}

// goccl_group_end is ncclGroupEnd: it waits for the group's inits and
// windows, then runs its calls; with simulate (ncclGroupSimulateEnd) it
// drops them.
//
//export goccl_group_end
func goccl_group_end(gid C.uint64_t, simulate C.int) C.int {
	const fn = "ncclGroupEnd"
	g := groupOf(gid)
	pending, windows, code := g.pending, g.windows, g.code
	g.pending, g.windows, g.code = g.pending[:0], g.windows[:0], ncclSuccess
	if simulate != 0 {
		g.g.Reset()
	}
	// Inits first: a group holding one thread's inits of several ranks
	// forms them all together (they were started when called).
	inProgress := false
	var initErr error
	var formed []*commHandle
	for _, h := range pending {
		if !h.blocking {
			inProgress = inProgress || !h.formed.Load()
			continue
		}
		h.wait()
		if h.err != nil && initErr == nil {
			initErr = h.err
		}
		if h.err == nil && h.c != nil && !h.orphan {
			formed = append(formed, h)
		}
	}
	newClique(formed)
	for _, w := range windows {
		<-w.ready
		if w.err != nil && initErr == nil {
			initErr = w.err
		}
	}
	if simulate != 0 {
		return code
	}
	err := g.g.Run(bg)
	switch {
	case code != ncclSuccess:
		return code
	case initErr != nil:
		return fail(fn, initErr)
	case err != nil:
		return fail(fn, err)
	case inProgress:
		return ncclInProgress
	}
	return ncclSuccess
}
