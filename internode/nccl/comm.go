package nccl

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

const (
	resultSuccess    = 0
	resultInProgress = 7
)

func check(call string, r C.int, comm unsafe.Pointer) error {
	if r == resultSuccess {
		return nil
	}
	return &Error{Call: call, Result: int(r), Text: C.GoString(C.gnccl_error_string(r)), Detail: C.GoString(C.gnccl_last_error(comm))}
}

// GetUniqueID makes the id of a new communicator.
func (l *Library) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	r := C.gnccl_unique_id((*C.uchar)(unsafe.Pointer(&id[0])))
	return id, check("ncclGetUniqueId", r, nil)
}

// initMu serializes inits: NCCL_HOSTID is process-wide.
var initMu sync.Mutex

// InitRank joins the communicator id names as rank of nranks, on the CUDA
// context cuctx (made current for the call), with NCCL_HOSTID set to
// hostID for the length of the call when hostID is not empty. It blocks
// until every rank has joined.
func (l *Library) InitRank(cuctx uintptr, nranks, rank int, id UniqueID, hostID string) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: rank %d of %d ranks: out of range", rank, nranks)
	}
	initMu.Lock()
	defer initMu.Unlock()
	if hostID != "" {
		old, had := os.LookupEnv("NCCL_HOSTID")
		if err := os.Setenv("NCCL_HOSTID", hostID); err != nil {
			return nil, fmt.Errorf("nccl: set NCCL_HOSTID: %w", err)
		}
		defer func() {
			if had {
				_ = os.Setenv("NCCL_HOSTID", old)
			} else {
				_ = os.Unsetenv("NCCL_HOSTID")
			}
		}()
	}
	var h unsafe.Pointer
	r := C.gnccl_init_rank(C.uintptr_t(cuctx), &h, C.int(nranks), (*C.uchar)(unsafe.Pointer(&id[0])), C.int(rank))
	if err := check("ncclCommInitRank", r, nil); err != nil {
		return nil, err
	}
	return &Comm{h: h, ctx: C.uintptr_t(cuctx), nranks: nranks, rank: rank}, nil
}

// GroupStart and GroupEnd bracket calls that NCCL must issue together
// (Sends and Recvs to several peers); GroupEnd makes cuctx current first.
func (l *Library) GroupStart() error { return check("ncclGroupStart", C.gnccl_group_start(), nil) }

// GroupEnd ends the group GroupStart began and enqueues its work.
func (l *Library) GroupEnd(cuctx uintptr) error {
	return check("ncclGroupEnd", C.gnccl_group_end(C.uintptr_t(cuctx)), nil)
}

// Comm is one NCCL communicator. Its calls enqueue on the given stream
// and return; like NCCL's, they are meant for one goroutine at a time,
// except AsyncError and Abort.
type Comm struct {
	h            unsafe.Pointer
	ctx          C.uintptr_t
	nranks, rank int
	// mu: calls share it, Abort and Destroy take it alone, so that the
	// handle is never freed under a call.
	mu   sync.RWMutex
	gone bool
}

// Size and Rank are the communicator's.
func (c *Comm) Size() int { return c.nranks }

// Rank is this rank's number in the communicator.
func (c *Comm) Rank() int { return c.rank }

type ptr = C.uintptr_t

// errGone: a call after Abort or Destroy.
var errGone = errors.New("nccl: communicator aborted or destroyed")

// call runs one NCCL call on the communicator, under the read lock that
// keeps Abort and Destroy from freeing it meanwhile.
func (c *Comm) call(name string, f func() C.int) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return errGone
	}
	return check(name, f(), c.h)
}

// AllReduce enqueues ncclAllReduce of count elements.
func (c *Comm) AllReduce(send, recv uintptr, count int, t DataType, op Op, stream uintptr) error {
	return c.call("ncclAllReduce", func() C.int {
		return C.gnccl_all_reduce(c.ctx, ptr(send), ptr(recv), C.size_t(count), C.int(t), C.int(op), c.h, ptr(stream))
	})
}

// ReduceScatter enqueues ncclReduceScatter; count is each rank's block.
func (c *Comm) ReduceScatter(send, recv uintptr, count int, t DataType, op Op, stream uintptr) error {
	return c.call("ncclReduceScatter", func() C.int {
		return C.gnccl_reduce_scatter(c.ctx, ptr(send), ptr(recv), C.size_t(count), C.int(t), C.int(op), c.h, ptr(stream))
	})
}

// AllGather enqueues ncclAllGather; count is each rank's block.
func (c *Comm) AllGather(send, recv uintptr, count int, t DataType, stream uintptr) error {
	return c.call("ncclAllGather", func() C.int {
		return C.gnccl_all_gather(c.ctx, ptr(send), ptr(recv), C.size_t(count), C.int(t), c.h, ptr(stream))
	})
}

// Broadcast enqueues ncclBroadcast from root.
func (c *Comm) Broadcast(send, recv uintptr, count int, t DataType, root int, stream uintptr) error {
	return c.call("ncclBroadcast", func() C.int {
		return C.gnccl_broadcast(c.ctx, ptr(send), ptr(recv), C.size_t(count), C.int(t), C.int(root), c.h, ptr(stream))
	})
}

// Reduce enqueues ncclReduce to root.
func (c *Comm) Reduce(send, recv uintptr, count int, t DataType, op Op, root int, stream uintptr) error {
	return c.call("ncclReduce", func() C.int {
		return C.gnccl_reduce(c.ctx, ptr(send), ptr(recv), C.size_t(count), C.int(t), C.int(op), C.int(root), c.h, ptr(stream))
	})
}

// Send enqueues ncclSend of count elements to peer.
func (c *Comm) Send(buf uintptr, count int, t DataType, peer int, stream uintptr) error {
	return c.call("ncclSend", func() C.int {
		return C.gnccl_send(c.ctx, ptr(buf), C.size_t(count), C.int(t), C.int(peer), c.h, ptr(stream))
	})
}

// Recv enqueues ncclRecv of count elements from peer.
func (c *Comm) Recv(buf uintptr, count int, t DataType, peer int, stream uintptr) error {
	return c.call("ncclRecv", func() C.int {
		return C.gnccl_recv(c.ctx, ptr(buf), C.size_t(count), C.int(t), C.int(peer), c.h, ptr(stream))
	})
}

// AsyncError is the communicator's asynchronous error (a peer gone, a
// network failure), nil while there is none.
func (c *Comm) AsyncError() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return nil
	}
	var res C.int
	if err := check("ncclCommGetAsyncError", C.gnccl_async_error(c.h, &res), c.h); err != nil {
		return err
	}
	if res == resultSuccess || res == resultInProgress {
		return nil
	}
	return check("asynchronous error", res, c.h)
}

// Abort stops the communicator's work and frees it; Destroy waits for
// its work and frees it. Either may be called once; later calls do nothing.
func (c *Comm) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil
	}
	c.gone = true
	return check("ncclCommAbort", C.gnccl_abort(c.h), nil)
}

// Destroy waits for the communicator's work and frees it.
func (c *Comm) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil
	}
	c.gone = true
	return check("ncclCommDestroy", C.gnccl_destroy(c.h), nil)
}
