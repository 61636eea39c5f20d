package main

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
)

// tcase is one checked call: a reference case and where its buffers sit.
type tcase struct {
	check.Case
	inPlace bool
	poison  byte
}

func (t tcase) String() string {
	place := "out-of-place"
	if t.inPlace {
		place = "in-place"
	}
	return fmt.Sprintf("%v %s", t.Case, place)
}

// placements lists the in-place settings to run.
func (c *config) placements() []bool {
	switch c.inplace {
	case placeOnly:
		return []bool{true}
	case placeNone:
		return []bool{false}
	}
	return []bool{false, true}
}

// buildCases lists every case in the order every rank runs them: the
// matrix (collective x dtype x op x root x count x placement), then the
// large messages. Each case gets its own seed and poison.
func buildCases(c *config, n int) ([]tcase, error) {
	roots, err := c.rootsFor(n)
	if err != nil {
		return nil, err
	}
	var out []tcase
	add := func(coll collectives.Collective, dt collectives.DataType, op collectives.Op, root, count int) {
		for _, ip := range c.placements() {
			i := len(out)
			out = append(out, tcase{
				Case:    check.Case{Coll: coll, Type: dt, Op: op, Root: root, NRanks: n, Count: count, Seed: check.Seed(c.seed, uint64(i)), Roundings: c.roundings},
				inPlace: ip,
				poison:  check.PoisonByte(i),
			})
		}
	}
	each := func(types []collectives.DataType, ops []collectives.Op, rootList []int, counts func(collectives.DataType) []int) {
		for _, coll := range c.colls {
			for _, dt := range types {
				opl := ops
				if !coll.Reduces() {
					opl = []collectives.Op{collectives.Sum}
				}
				rl := []int{0}
				if coll.Rooted() {
					rl = rootList
				}
				for _, op := range opl {
					for _, root := range rl {
						for _, cnt := range counts(dt) {
							add(coll, dt, op, root, cnt)
						}
					}
				}
			}
		}
	}
	each(c.types, c.ops, roots, func(collectives.DataType) []int { return c.counts })
	if len(c.large) > 0 {
		// One root is enough at sizes that only test bandwidth paths.
		each(c.largeTypes, c.largeOps, roots[:1], func(dt collectives.DataType) []int {
			var cs []int
			for _, b := range c.large {
				cs = append(cs, int(b/int64(dt.Size())))
			}
			return cs
		})
	}
	return out, nil
}
