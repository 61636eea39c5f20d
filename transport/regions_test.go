package transport

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type priv struct{ owner int }

func newRegions(n int) (*Regions[*priv], []*Region) {
	var s Regions[*priv]
	rs := make([]*Region, n)
	for i := range rs {
		rs[i] = &Region{Size: uint64(i + 1), Priv: &priv{owner: 1}}
		s.Add(rs[i])
	}
	return &s, rs
}

func TestRegionsTake(t *testing.T) {
	mine := func(p *priv) bool { return p.owner == 1 }
	foreign := &Region{Priv: &priv{owner: 1}}
	wrongPriv := &Region{Priv: "not a *priv"}
	for _, tc := range []struct {
		name   string
		take   func(rs []*Region) *Region
		owned  func(*priv) bool
		ok     bool
		remain []int // indices of the regions left, oldest first
	}{
		{"oldest", func(rs []*Region) *Region { return rs[0] }, mine, true, []int{1, 2}},
		{"middle", func(rs []*Region) *Region { return rs[1] }, mine, true, []int{0, 2}},
		{"newest", func(rs []*Region) *Region { return rs[2] }, mine, true, []int{0, 1}},
		{"nil", func([]*Region) *Region { return nil }, mine, false, []int{0, 1, 2}},
		{"not live here", func([]*Region) *Region { return foreign }, mine, false, []int{0, 1, 2}},
		{"owner refuses", func(rs []*Region) *Region { return rs[1] }, func(*priv) bool { return false }, false, []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rs := newRegions(3)
			r := tc.take(rs)
			p, ok := s.Take(r, tc.owned)
			require.Equal(t, tc.ok, ok)
			if ok {
				assert.Same(t, r.Priv, p)
			} else {
				assert.Nil(t, p)
			}
			var want []*Region
			for _, i := range tc.remain {
				want = append(want, rs[i])
			}
			assert.Equal(t, want, slices.Collect(s.All()))
			assert.Equal(t, len(want), s.Len())
			_, again := s.Take(r, tc.owned)
			assert.False(t, again, "a region is taken once")
		})
	}
	t.Run("priv of another type", func(t *testing.T) {
		s, _ := newRegions(1)
		s.Add(wrongPriv)
		_, ok := s.Take(wrongPriv, mine)
		assert.False(t, ok)
		assert.Equal(t, 2, s.Len())
	})
}

func TestRegionsDeleteFunc(t *testing.T) {
	s, rs := newRegions(4)
	s.DeleteFunc(func(r *Region) bool { return r.Size%2 == 0 })
	assert.Equal(t, []*Region{rs[0], rs[2]}, slices.Collect(s.All()))
}

func TestRegionsDrain(t *testing.T) {
	errOdd := errors.New("odd")
	s, rs := newRegions(5)
	s.Add(&Region{Size: 99, Priv: 42}) // not a *priv: dropped unreleased
	var order []uint64
	err := s.Drain(time.Minute, func(ctx context.Context, r *Region, p *priv) error {
		dl, ok := ctx.Deadline()
		require.True(t, ok, "Drain's context has a deadline")
		assert.WithinDuration(t, time.Now().Add(time.Minute), dl, 5*time.Second)
		assert.Same(t, r.Priv, p)
		order = append(order, r.Size)
		if r == rs[3] {
			// Releasing a region may remove others (vmm's views).
			s.DeleteFunc(func(v *Region) bool { return v == rs[1] })
		}
		if r.Size%2 == 1 {
			return errOdd
		}
		return nil
	})
	assert.Equal(t, []uint64{5, 4, 3, 1}, order, "newest first, removed ones skipped")
	assert.Zero(t, s.Len())
	require.Error(t, err)
	assert.ErrorIs(t, err, errOdd)
	assert.Equal(t, "odd\nodd\nodd", err.Error())
	assert.NoError(t, s.Drain(time.Minute, func(context.Context, *Region, *priv) error {
		t.Fatal("nothing left to release")
		return nil
	}))
}
