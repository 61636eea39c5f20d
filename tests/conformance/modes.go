package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
	"github.com/goccl/goccl/internal/membuf"
)

// modeCount is the element count graph and stress use: the largest of
// --counts, at most a little over 1 Mi so that a thousand calls stay quick.
func (c *config) modeCount() int {
	n := 4095
	for _, x := range c.counts {
		if x > 0 {
			n = max(n, x)
		}
	}
	return min(n, 1<<20+3)
}

// slotCase is the i-th collective's case in graph and stress modes: it
// cycles through the selected types and ops so that a run covers several.
func (r *rankRunner) slotCase(i int, coll collectives.Collective, salt uint64) tcase {
	c := r.cfg
	return tcase{Case: check.Case{
		Coll: coll, Type: c.types[i%len(c.types)], Op: c.ops[i%len(c.ops)], Root: i % r.n,
		NRanks: r.n, Count: c.modeCount(), Seed: check.Seed(c.seed, salt, uint64(i)), Roundings: c.roundings,
	}, poison: check.PoisonByte(i)}
}

// slot is a case with buffers of its own.
type slot struct {
	tc         tcase
	send, recv membuf.Buffer
	l          layout
}

func (r *rankRunner) newSlot(tc tcase) (*slot, error) {
	in, out := r.needs(tc)
	if len(r.stage) < in {
		r.stage = make([]byte, in)
	}
	if len(r.got) < max(in, out)+guard {
		r.got = make([]byte, max(in, out)+guard)
	}
	s := &slot{tc: tc}
	var err error
	if s.send, err = r.rk.Space.Alloc(in + guard); err != nil {
		return nil, err
	}
	if s.recv, err = r.rk.Space.Alloc(out + guard); err != nil {
		_ = r.rk.Space.Free(s.send)
		return nil, err
	}
	s.l = r.layoutOf(tc, s.send, s.recv)
	return s, nil
}

func (r *rankRunner) freeSlot(s *slot) error {
	return errors.Join(r.rk.Space.Free(s.send), r.rk.Space.Free(s.recv))
}

// runGraph captures one call per collective in a CUDA graph and replays it
// cfg.graph times, each replay on fresh inputs written before it, checking
// every replay.
func (r *rankRunner) runGraph(ctx context.Context) error {
	g, ok := r.rk.Space.(membuf.Grapher)
	if !ok {
		return fmt.Errorf("--graph: %w", membuf.ErrNoGraphs)
	}
	for i, coll := range r.cfg.colls {
		tc := r.slotCase(i, coll, 0x6772617068)
		s, err := r.newSlot(tc)
		if err != nil {
			return err
		}
		err = r.graphOne(ctx, g, s, i)
		if e := r.freeSlot(s); err == nil {
			err = e
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *rankRunner) graphOne(ctx context.Context, g membuf.Grapher, s *slot, i int) error {
	if err := r.prepare(s.tc, s.l); err != nil {
		return err
	}
	if err := r.rk.Space.Sync(ctx); err != nil {
		return err
	}
	if err := g.BeginCapture(); err != nil {
		return fmt.Errorf("graph %v: %w", s.tc.Coll, err)
	}
	runErr := r.rk.Comm.Run(ctx, &s.l.args)
	graph, err := g.EndCapture()
	if runErr != nil {
		return fmt.Errorf("graph capture of %v: %w", s.tc, runErr)
	}
	if err != nil {
		return fmt.Errorf("graph %v: %w", s.tc.Coll, err)
	}
	defer graph.Close()
	for rep := 0; rep < r.cfg.graph; rep++ {
		tc := s.tc
		tc.Seed = check.Seed(r.cfg.seed, 0x7265706c6179, uint64(i), uint64(rep))
		tc.poison = check.PoisonByte(rep)
		if err := r.prepare(tc, s.l); err != nil {
			return err
		}
		if err := graph.Launch(); err != nil {
			return fmt.Errorf("graph replay %d of %v: %w", rep, tc.Coll, err)
		}
		if err := r.rk.Space.Sync(ctx); err != nil {
			return fmt.Errorf("graph replay %d of %v: %w", rep, tc.Coll, err)
		}
		if err := r.verify(tc, s.l, fmt.Sprintf("graph replay %d: ", rep)); err != nil {
			return err
		}
	}
	return nil
}

// runStress enqueues cfg.stress calls back to back on one stream, mixing
// the collectives (each on its own buffers, every one at least once), then
// checks every buffer's last result.
func (r *rankRunner) runStress(ctx context.Context) error {
	var slots []*slot
	defer func() {
		for _, s := range slots {
			_ = r.freeSlot(s)
		}
	}()
	for i, coll := range r.cfg.colls {
		s, err := r.newSlot(r.slotCase(i, coll, 0x737472657373))
		if err != nil {
			return err
		}
		slots = append(slots, s)
		if err := r.prepare(s.tc, s.l); err != nil {
			return err
		}
	}
	for k := 0; k < r.cfg.stress; k++ {
		i := k
		if k >= len(slots) {
			i = int(check.Seed(r.cfg.seed, 0x6d6978, uint64(k)) % uint64(len(slots)))
		}
		if err := r.rk.Comm.Run(ctx, &slots[i].l.args); err != nil {
			return fmt.Errorf("stress call %d (%v): %w", k, slots[i].tc, err)
		}
	}
	if err := r.rk.Space.Sync(ctx); err != nil {
		return fmt.Errorf("stress: %w", err)
	}
	for _, s := range slots {
		if err := r.verify(s.tc, s.l, fmt.Sprintf("after %d mixed calls: ", r.cfg.stress)); err != nil {
			return err
		}
	}
	return nil
}
