package ucx

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

// Worker is one rank's UCX worker with an endpoint to every other rank
// of a bootstrap. It is single-threaded: one goroutine at a time posts
// and waits.
type Worker struct {
	rank, n int
	ctx     unsafe.Pointer
	w       unsafe.Pointer
	eps     []unsafe.Pointer // eps[rank] is nil
	state   *C.int8_t        // n endpoint states, C memory: 0 or the failure's status
	closed  bool
	// dirty: a wait gave up on ops still in flight; UCX holds them on
	// their endpoints, which Close must then close forcibly.
	dirty bool
	got   *C.size_t // C memory for a receive's length (a Go local would escape)
}

// Op is a posted send or receive.
type Op struct {
	req  unsafe.Pointer // nil once complete
	Peer int
	recv bool
	want int // a receive's size
}

const (
	statusOK         = 0
	statusInProgress = 1
	statusTruncated  = -9 // UCS_ERR_MESSAGE_TRUNCATED
)

// New creates this rank's worker, exchanges worker addresses through b
// (one AllGather) and connects an endpoint to every other rank. loadErr is
// this rank's result of Load: it is exchanged in the same AllGather, so
// that when any rank lacks libucp every rank fails naming it.
func New(ctx context.Context, b transport.Bootstrap, loadErr error) (*Worker, error) {
	rank, n := b.Rank(), b.Size()
	wk := &Worker{rank: rank, n: n, eps: make([]unsafe.Pointer, n)}
	var mine []byte
	var addr unsafe.Pointer
	err := loadErr
	if err == nil {
		err = wk.open()
	}
	if err == nil {
		var alen C.size_t
		if s := C.g_address(wk.w, &addr, &alen); s != statusOK {
			err = fmt.Errorf("ucx: worker address: %s", statusString(s))
		} else {
			mine = append([]byte{0}, C.GoBytes(addr, C.int(alen))...)
			C.g_release_address(wk.w, addr)
		}
	}
	if err != nil {
		mine = append([]byte{1}, err.Error()...)
	}
	all, gerr := b.AllGather(ctx, mine)
	if err == nil && gerr != nil {
		err = fmt.Errorf("ucx: exchanging worker addresses: %w", gerr)
	}
	if err == nil {
		for r, a := range all {
			if len(a) == 0 || a[0] != 0 {
				msg := "no address"
				if len(a) > 0 {
					msg = string(a[1:])
				}
				err = &PeerError{Rank: r, Cause: fmt.Errorf("%w: %s", ErrUnavailable, msg)}
				break
			}
		}
	}
	if err == nil {
		err = wk.connect(all)
	}
	if err != nil {
		wk.Close()
		return nil, err
	}
	return wk, nil
}

func (wk *Worker) open() error {
	wk.state = (*C.int8_t)(C.calloc(C.size_t(wk.n), 1))
	wk.got = (*C.size_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.size_t(0)))))
	if s := C.g_init(minMajor, minMinor, &wk.ctx); s != statusOK {
		wk.ctx = nil
		return fmt.Errorf("ucx: ucp_init: %s (UCX_TLS and UCX_NET_DEVICES choose the transports)", statusString(s))
	}
	if s := C.g_worker(wk.ctx, &wk.w); s != statusOK {
		wk.w = nil
		return fmt.Errorf("ucx: ucp_worker_create: %s", statusString(s))
	}
	return nil
}

func (wk *Worker) connect(all [][]byte) error {
	for r, a := range all {
		if r == wk.rank {
			continue
		}
		addr := C.CBytes(a[1:])
		var ep unsafe.Pointer
		s := C.g_ep(wk.w, addr, wk.stateOf(r), &ep)
		C.free(addr)
		if s != statusOK {
			return &PeerError{Rank: r, Cause: fmt.Errorf("%w: ucp_ep_create: %s", ErrPeer, statusString(s))}
		}
		wk.eps[r] = ep
	}
	return nil
}

func (wk *Worker) stateOf(r int) *C.int8_t {
	return (*C.int8_t)(unsafe.Add(unsafe.Pointer(wk.state), r))
}

// Failed reports the status of rank r's endpoint: nil while it is well.
func (wk *Worker) Failed(r int) error {
	if r < 0 || r >= wk.n || wk.state == nil {
		return nil
	}
	if s := *wk.stateOf(r); s != 0 {
		return &PeerError{Rank: r, Cause: fmt.Errorf("%w: %s", ErrPeer, statusString(C.int(s)))}
	}
	return nil
}

// Rank is this rank's number in the bootstrap.
func (wk *Worker) Rank() int { return wk.rank }

// Size is the bootstrap's number of ranks.
func (wk *Worker) Size() int { return wk.n }

// Send posts n bytes at buf (host memory the caller keeps alive until
// the op completes) to rank peer under tag.
func (wk *Worker) Send(peer int, tag uint64, buf uintptr, n int) (Op, error) {
	if err := wk.Failed(peer); err != nil {
		return Op{}, err
	}
	p := C.g_send(wk.eps[peer], C.uintptr_t(buf), C.size_t(n), C.uint64_t(tag))
	if s := C.g_ptr_status(p); s != 0 {
		return Op{}, &PeerError{Rank: peer, Cause: fmt.Errorf("%w: send: %s", ErrPeer, statusString(s))}
	}
	return Op{req: p, Peer: peer}, nil
}

// Recv posts a receive of up to n bytes into buf from peer under tag (the
// tag names the sender: tags are matched exactly).
//
// A message of another size than n fails the wait with ErrSizeMismatch
// naming the sender (after the wait's other ops have finished).
func (wk *Worker) Recv(peer int, tag uint64, buf uintptr, n int) (Op, error) {
	p := C.g_recv(wk.w, C.uintptr_t(buf), C.size_t(n), C.uint64_t(tag))
	if s := C.g_ptr_status(p); s != 0 || p == nil {
		return Op{}, &PeerError{Rank: peer, Cause: fmt.Errorf("recv: %s", statusString(s))}
	}
	return Op{req: p, Peer: peer, recv: true, want: n}, nil
}

// sizeError: peer sent got bytes (-1: more than want) where want were
// expected.
func (wk *Worker) sizeError(peer, got, want int) error {
	sent := fmt.Sprintf("%d bytes", got)
	if got < 0 {
		sent = fmt.Sprintf("more than %d bytes", want)
	}
	return &PeerError{Rank: peer, Cause: fmt.Errorf("%w: rank %d sent %s, rank %d expected %d", ErrSizeMismatch, peer, sent, wk.rank, want)}
}

// Progress advances the worker once; it reports whether anything moved.
func (wk *Worker) Progress() bool { return C.g_progress(wk.w) != 0 }

// Wait progresses until every op of ops has completed, or one failed (its
// peer died: the error names it), or the policy ends the wait. On error
// every op still pending is cancelled and released: the buffers are the
// caller's again. ops are complete after Wait either way.
func (wk *Worker) Wait(ops []Op, pol WaitPolicy) error {
	var start, closedAt time.Time
	var mismatch error // the first; the other ops still finish
	idle := 0
	for polls := 0; ; polls++ {
		moved := wk.Progress()
		pending := 0
		for i := range ops {
			o := &ops[i]
			if o.req == nil {
				continue
			}
			var s C.int
			got := o.want
			if o.recv {
				s = C.g_recv_test(o.req, wk.got)
				got = int(*wk.got)
			} else {
				s = C.g_check(o.req)
			}
			if s == statusInProgress {
				if err := wk.Failed(o.Peer); err != nil {
					wk.cancel(ops)
					return err
				}
				pending++
				continue
			}
			C.g_free(o.req)
			o.req = nil
			switch {
			case s == statusOK && got == o.want:
			case s == statusOK || s == statusTruncated:
				if mismatch == nil {
					g := got
					if s == statusTruncated {
						g = -1
					}
					mismatch = wk.sizeError(o.Peer, g, o.want)
				}
			default:
				err := wk.opError(o, s)
				wk.cancel(ops)
				return err
			}
		}
		if pending == 0 {
			return mismatch
		}
		if moved {
			idle = 0
			continue
		}
		idle++
		if idle < 64 {
			continue
		}
		if polls%16 == 0 {
			if start.IsZero() {
				start = time.Now()
			}
			if pol.Check != nil {
				if err := pol.Check(); err != nil {
					wk.cancel(ops)
					return err
				}
			}
			now := time.Now()
			if r := firstPending(ops); pol.Closed != nil && r >= 0 && pol.Closed(r) {
				if closedAt.IsZero() {
					closedAt = now
				} else if now.Sub(closedAt) > pol.Grace {
					wk.cancel(ops)
					return &PeerError{Rank: r, Cause: fmt.Errorf("%w with data still owed to rank %d", ErrPeerClosed, wk.rank)}
				}
			}
			if pol.Timeout > 0 && now.Sub(start) > pol.Timeout {
				r := firstPending(ops)
				wk.cancel(ops)
				return &PeerError{Rank: r, Cause: fmt.Errorf("rank %d waited %v: %w", wk.rank, pol.Timeout, ErrTimeout)}
			}
		}
		// Nothing moved for a while: let other goroutines (and, on an
		// oversubscribed machine, other ranks) run.
		if idle < 1024 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

func firstPending(ops []Op) int {
	for i := range ops {
		if ops[i].req != nil {
			return ops[i].Peer
		}
	}
	return -1
}

func (wk *Worker) opError(o *Op, s C.int) error {
	if err := wk.Failed(o.Peer); err != nil {
		return err
	}
	what := "send to"
	if o.recv {
		what = "receive from"
	}
	return &PeerError{Rank: o.Peer, Cause: fmt.Errorf("%w: %s rank %d: %s", ErrPeer, what, o.Peer, statusString(s))}
}

// cancel ends every op still pending: receives are cancelled, sends
// given a little progress; what does not end in time is released to UCX,
// which frees it when it completes.
func (wk *Worker) cancel(ops []Op) {
	for i := range ops {
		if o := &ops[i]; o.req != nil && o.recv {
			C.g_cancel(wk.w, o.req)
		}
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		wk.Progress()
		left := 0
		for i := range ops {
			o := &ops[i]
			if o.req == nil {
				continue
			}
			if C.g_check(o.req) != statusInProgress {
				C.g_free(o.req)
				o.req = nil
				continue
			}
			left++
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
	}
	for i := range ops {
		if o := &ops[i]; o.req != nil {
			C.g_free(o.req)
			o.req = nil
			wk.dirty = true
		}
	}
}

// closeWait bounds how long Close flushes the endpoints: a flush needs
// the peer to progress, which a peer that closes later, or never, does
// not; what it had received by then it has.
const closeWait = time.Second

// Close flushes and closes every endpoint (forcibly those whose peer is
// gone, and all of them after a wait gave up on ops in flight) and
// releases the worker.
func (wk *Worker) Close() {
	if wk.closed {
		return
	}
	wk.closed = true
	var reqs []unsafe.Pointer
	for r, ep := range wk.eps {
		if ep == nil {
			continue
		}
		// A flush would wait for a dead peer, and UCX may not destroy a
		// worker whose endpoints still hold requests: those are purged.
		force := 0
		if wk.dirty || wk.Failed(r) != nil {
			force = 1
		}
		if p := C.g_ep_close(ep, C.int(force)); p != nil && C.g_ptr_status(p) == 0 {
			reqs = append(reqs, p)
		}
		wk.eps[r] = nil
	}
	deadline := time.Now().Add(closeWait)
	for len(reqs) > 0 && time.Now().Before(deadline) {
		wk.Progress()
		kept := reqs[:0]
		for _, p := range reqs {
			if C.g_check(p) == statusInProgress {
				kept = append(kept, p)
				continue
			}
			C.g_free(p)
		}
		reqs = kept
		if len(reqs) > 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, p := range reqs {
		C.g_free(p)
	}
	if wk.w != nil {
		C.g_worker_destroy(wk.w)
		wk.w = nil
	}
	if wk.ctx != nil {
		C.g_cleanup(wk.ctx)
		wk.ctx = nil
	}
	if wk.state != nil {
		C.free(unsafe.Pointer(wk.state))
		wk.state = nil
	}
	if wk.got != nil {
		C.free(unsafe.Pointer(wk.got))
		wk.got = nil
	}
}

// Cancel ends every op of ops still pending and releases it (after a
// failure to post the rest of a set).
func (wk *Worker) Cancel(ops []Op) { wk.cancel(ops) }
