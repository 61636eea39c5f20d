package transport

import (
	"context"
	"errors"
	"iter"
	"slices"
	"time"
)

// Regions is a Mapper's list of live regions, oldest first, each with a
// Priv of type P. It does no locking: mappers hold their own lock around
// whole collective operations.
type Regions[P any] struct {
	list []*Region
}

// Add records r as live, newest.
func (s *Regions[P]) Add(r *Region) { s.list = append(s.list, r) }

// Len is the number of live regions.
func (s *Regions[P]) Len() int { return len(s.list) }

// All yields the live regions, oldest first.
func (s *Regions[P]) All() iter.Seq[*Region] { return slices.Values(s.list) }

// Take removes r and returns its Priv, provided r is live here, its Priv
// is a P and owned accepts it (a mapper checks that the region is its
// own). Otherwise nothing changes and ok is false.
func (s *Regions[P]) Take(r *Region, owned func(P) bool) (p P, ok bool) {
	if r == nil {
		return p, false
	}
	i := slices.Index(s.list, r)
	p, ok = r.Priv.(P)
	if i < 0 || !ok || !owned(p) {
		var zero P
		return zero, false
	}
	s.list = slices.Delete(s.list, i, i+1)
	return p, true
}

// DeleteFunc removes every live region for which del is true.
func (s *Regions[P]) DeleteFunc(del func(*Region) bool) {
	s.list = slices.DeleteFunc(s.list, del)
}

// Drain takes the live regions newest first and calls release on each,
// under a context bounded by timeout, since Close has no context of its
// own. release may remove other regions (views dying with their parent);
// regions whose Priv is not a P are dropped. It returns every error
// release returned, joined.
func (s *Regions[P]) Drain(timeout time.Duration, release func(ctx context.Context, r *Region, p P) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	for len(s.list) > 0 {
		n := len(s.list)
		r := s.list[n-1]
		s.list = slices.Delete(s.list, n-1, n)
		p, ok := r.Priv.(P)
		if !ok {
			continue
		}
		if err := release(ctx, r, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
