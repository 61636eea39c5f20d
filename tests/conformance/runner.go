package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
	"github.com/goccl/goccl/internal/membuf"
)

// guard bytes follow every buffer region a call may write; they must keep
// their poison (a write past the end is a failure even if the output is
// right).
const guard = 256

// rankRunner runs the cases of one rank.
type rankRunner struct {
	cfg   *config
	rk    bench.Rank
	me, n int
	out   *syncWriter

	send, recv membuf.Buffer
	scalar     membuf.Buffer // PreMulSum's scalar, for the calls that pass its address
	bufs       bench.Buffers // where send and recv come from (--register, --register-user)
	stage, got []byte

	cases, failed int
	shown         int
}

// syncWriter serializes lines from in-process ranks.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, a...)
}

func newRankRunner(cfg *config, rk bench.Rank, out *syncWriter) *rankRunner {
	return &rankRunner{cfg: cfg, rk: rk, me: rk.Comm.Rank(), n: rk.Comm.Size(), out: out}
}

// layout is where one case's buffers sit.
type layout struct {
	args     collectives.Args
	recv     membuf.Buffer
	inBuf    membuf.Buffer // where the input is written
	inOff    int
	outOff   int // output offset in recv
	recvSpan int // bytes of recv the call may write
	inBytes  int
}

func (r *rankRunner) layoutOf(tc tcase, send, recv membuf.Buffer) layout {
	c := tc.Case
	ts := c.Type.Size()
	a := collectives.Args{Coll: c.Coll, Send: send.Ptr, Recv: recv.Ptr, Count: c.Count, Type: c.Type, Op: c.Op, Root: c.Root, Stream: r.rk.Space.Stream()}
	if c.Coll.Reduces() && c.Op == collectives.PreMulSum {
		// Each rank its own scalar, by value (runCases passes some by address).
		a.Scalar, _ = check.PremulScalarOf(c, r.me) // (the case's type is valid)
	}
	l := layout{recv: recv, inBuf: send, inBytes: c.InputCount() * ts, recvSpan: a.RecvBytes(r.n)}
	if tc.inPlace {
		slot := r.me * c.Count * ts
		a.Send = recv.Ptr
		l.inBuf = recv
		switch c.Coll {
		case collectives.AllGather:
			a.Send, l.inOff = recv.At(slot), slot
		case collectives.ReduceScatter:
			a.Recv, l.outOff = recv.At(slot), slot
		}
		l.recvSpan = max(l.recvSpan, l.inBytes)
	}
	l.args = a
	return l
}

// needs returns the send and receive bytes (guards excluded) of a case.
func (r *rankRunner) needs(tc tcase) (int, int) {
	ts := tc.Type.Size()
	in := tc.InputCount() * ts
	outAll := tc.Count * ts
	if tc.Coll == collectives.AllGather {
		outAll *= r.n
	}
	return in, max(in, outAll)
}

func (r *rankRunner) allocate(ctx context.Context, cases []tcase) error {
	var s, v int
	for _, tc := range cases {
		a, b := r.needs(tc)
		s, v = max(s, a), max(v, b)
	}
	// Registration is collective: every rank computes the same sizes from
	// the same cases, as it must be symmetric.
	mode := bench.Unregistered
	switch {
	case r.cfg.register:
		mode = bench.FromAlloc
	case r.cfg.regUser:
		mode = bench.UserMemory
	}
	var ok bool
	if r.bufs, ok = bench.NewBuffers(r.rk.Space, r.rk.Comm, mode); !ok {
		return fmt.Errorf("%w: --register: this communicator cannot register buffers", errUsage)
	}
	var err error
	if r.send, err = r.bufs.Alloc(ctx, s+guard); err != nil {
		return err
	}
	if r.recv, err = r.bufs.Alloc(ctx, v+guard); err != nil {
		return err
	}
	if r.scalar, err = r.rk.Space.Alloc(8); err != nil { // not registered: no peer reads it
		return err
	}
	r.stage = make([]byte, s)
	r.got = make([]byte, max(s, v)+guard)
	return nil
}

// free releases the registrations first: the peers unmap before the
// memory under them goes back to the space.
func (r *rankRunner) free(ctx context.Context) error {
	err := r.bufs.Free(ctx)
	if r.scalar.Ptr != 0 {
		err = errors.Join(err, r.rk.Space.Free(r.scalar))
	}
	return err
}

// runCases runs the matrix. Its error is fatal (a call failed); wrong
// results are counted, not returned.
func (r *rankRunner) runCases(ctx context.Context, cases []tcase) error {
	for _, tc := range cases {
		l := r.layoutOf(tc, r.send, r.recv)
		if err := r.prepare(tc, l); err != nil {
			return err
		}
		if err := r.scalarByAddress(tc, &l); err != nil {
			return err
		}
		if err := r.rk.Comm.Run(ctx, &l.args); err != nil {
			return fmt.Errorf("%v: %w", tc, err)
		}
		if err := r.rk.Space.Sync(ctx); err != nil {
			return fmt.Errorf("%v: %w", tc, err)
		}
		if err := r.verify(tc, l, ""); err != nil {
			return err
		}
	}
	return nil
}

// scalarByAddress makes every other PreMulSum case of the matrix pass its
// scalar by address (device memory on the GPU), written just before the
// call: the call must read it when it runs.
func (r *rankRunner) scalarByAddress(tc tcase, l *layout) error {
	a := &l.args
	if !a.Coll.Reduces() || a.Op != collectives.PreMulSum || tc.Seed&1 == 0 {
		return nil
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], a.Scalar.Bits)
	if err := r.rk.Space.CopyIn(r.scalar, 0, b[:tc.Type.Size()]); err != nil {
		return err
	}
	a.Scalar = collectives.ScalarAt(r.scalar.Ptr)
	return nil
}

// prepare poisons what the call may write (and the guards) and writes
// this rank's fresh input.
func (r *rankRunner) prepare(tc tcase, l layout) error {
	sp := r.rk.Space
	if !tc.inPlace {
		if err := sp.Fill(l.inBuf, l.inOff+l.inBytes, guard, tc.poison); err != nil {
			return err
		}
	}
	if err := sp.Fill(l.recv, 0, l.recvSpan+guard, tc.poison); err != nil {
		return err
	}
	if !tc.HasInput(r.me) || l.inBytes == 0 {
		return nil
	}
	in := r.stage[:l.inBytes]
	if err := check.FillInput(tc.Case, r.me, in); err != nil {
		return err
	}
	return sp.CopyIn(l.inBuf, l.inOff, in)
}

// verify checks the output, the guards and (out of place) that the input
// is intact, and records a failure.
func (r *rankRunner) verify(tc tcase, l layout, what string) error {
	r.cases++
	sp := r.rk.Space
	ts := tc.Type.Size()
	recv := l.recv
	var problems []string
	outB := tc.OutputCount(r.me) * ts
	got := r.got[:outB]
	if err := sp.CopyOut(got, recv, l.outOff); err != nil {
		return err
	}
	res, err := check.Verify(tc.Case, r.me, got)
	if err != nil {
		return err
	}
	if !res.OK() {
		problems = append(problems, res.String())
	}
	g := r.got[:guard]
	if err := sp.CopyOut(g, recv, l.recvSpan); err != nil {
		return err
	}
	if n := check.Changed(g, tc.poison); n > 0 {
		problems = append(problems, fmt.Sprintf("%d bytes written past the end of the output", n))
	}
	if !tc.inPlace && tc.HasInput(r.me) {
		in := r.got[:l.inBytes+guard]
		if err := sp.CopyOut(in, l.inBuf, l.inOff); err != nil {
			return err
		}
		want := r.stage[:l.inBytes]
		if err := check.FillInput(tc.Case, r.me, want); err != nil {
			return err
		}
		if !bytes.Equal(in[:l.inBytes], want) {
			problems = append(problems, "the send buffer was modified")
		}
		if n := check.Changed(in[l.inBytes:], tc.poison); n > 0 {
			problems = append(problems, fmt.Sprintf("%d bytes written past the end of the send buffer", n))
		}
	}
	if len(problems) > 0 {
		r.failed++
		if r.shown < r.cfg.show {
			r.shown++
			r.out.printf("conformance: rank %d: FAIL %s%v: %v\n", r.me, what, tc, problems)
		}
	}
	return nil
}
