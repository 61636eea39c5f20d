package vmm

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// Register's agreement payload, one per rank: a route byte, then two
// little-endian uint64s. For a view (memory inside one of this Mapper's
// Allocs) they are the Alloc's sequence number and the offset in it; for
// foreign memory, the pointer and size, which only serve to name the
// buffer when the ranks' routes differ.
const (
	routeView byte = iota
	routeForeign

	routeLen = 1 + 8 + 8
)

// route is one rank's decoded Register payload.
type route struct {
	foreign   bool
	seq, off  uint64 // view
	ptr, size uint64 // foreign
}

// route finds the live Alloc holding [ptr, ptr+size): nil when none holds
// any of it (foreign memory). A buffer that straddles an Alloc's edge is a
// bad argument rather than foreign: IPC could not share it either.
func (m *Mapper) route(ptr uintptr, size uint64) (*transport.Region, *StepError) {
	me := m.b.Rank()
	if size == 0 {
		return nil, stepErr(me, "Register", -1, fmt.Errorf("size 0: %w", cuda.ErrorInvalidValue))
	}
	lo := uint64(ptr)
	hi := lo + size
	if hi < lo {
		return nil, stepErr(me, "Register", -1, fmt.Errorf("[%#x,+%d) wraps the address space: %w", ptr, size, cuda.ErrorInvalidValue))
	}
	for r := range m.regions.All() {
		if reg, ok := r.Priv.(*region); !ok || reg.parent != nil {
			continue // a view lies inside its parent, which is also listed
		}
		alo, ahi := uint64(r.Local), uint64(r.Local)+r.Size
		switch {
		case lo >= alo && hi <= ahi:
			return r, nil
		case lo < ahi && alo < hi:
			return nil, stepErr(me, "Register", -1, fmt.Errorf("[%#x,+%d) overruns this mapper's Alloc [%#x,+%d): %w",
				ptr, size, r.Local, r.Size, cuda.ErrorInvalidValue))
		}
	}
	return nil, nil
}

// routePayload is this rank's Register payload for parent (nil: foreign).
func routePayload(parent *transport.Region, ptr uintptr, size uint64) []byte {
	if parent == nil {
		p := binary.LittleEndian.AppendUint64([]byte{routeForeign}, uint64(ptr))
		return binary.LittleEndian.AppendUint64(p, size)
	}
	p := binary.LittleEndian.AppendUint64([]byte{routeView}, parent.Priv.(*region).seq)
	return binary.LittleEndian.AppendUint64(p, uint64(ptr-parent.Local))
}

// decodeRoutes decodes every rank's payload. Every rank decodes the same
// payloads, so all fail together or none does.
func (m *Mapper) decodeRoutes(all [][]byte) ([]route, error) {
	routes := make([]route, len(all))
	for r, p := range all {
		if len(p) != routeLen || p[0] > routeForeign {
			return nil, stepErr(m.b.Rank(), "decode route", r, fmt.Errorf("route message of %d bytes, want %d with kind 0 or 1", len(p), routeLen))
		}
		a, b := binary.LittleEndian.Uint64(p[1:]), binary.LittleEndian.Uint64(p[9:])
		if p[0] == routeForeign {
			routes[r] = route{foreign: true, ptr: a, size: b}
		} else {
			routes[r] = route{seq: a, off: b}
		}
	}
	return routes, nil
}

// splitRoutes lists the ranks registering foreign memory and those
// registering memory inside one of their Allocs.
func splitRoutes(routes []route) (foreign, views []int) {
	for r, rt := range routes {
		if rt.foreign {
			foreign = append(foreign, r)
		} else {
			views = append(views, r)
		}
	}
	return foreign, views
}

// mixedRoutes is the verdict, the same on every rank, when some ranks
// register foreign memory and others memory from an Alloc (both lists
// non-empty): neither route can serve them all (a VMM view needs every
// peer's Alloc, IPC cannot export VMM memory). It names the first foreign
// rank and, as the peer, the first rank inside an Alloc.
func mixedRoutes(routes []route, foreign, views []int) error {
	f, v := routes[foreign[0]], routes[views[0]]
	return stepErr(foreign[0], "Register", views[0], fmt.Errorf(
		"ranks take different routes: outside this mapper's Allocs (ipc route): %s (first: %#x, %d bytes); "+
			"inside one (vmm route): %s (first: Alloc #%d, offset %d); every rank must register the same kind of memory: %w",
		rankList(foreign), f.ptr, f.size, rankList(views), v.seq, v.off, cuda.ErrNotSupported))
}

// rankList writes "rank 3" or "ranks 0, 1, 2", shortened past a few.
func rankList(ranks []int) string {
	const show = 8
	var b strings.Builder
	if len(ranks) == 1 {
		b.WriteString("rank ")
	} else {
		b.WriteString("ranks ")
	}
	for i, r := range ranks {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(ranks)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, r)
	}
	return b.String()
}

// registerForeign registers memory this Mapper did not make, through the
// ipc Mapper (collective: every rank chose this route).
func (m *Mapper) registerForeign(ctx context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	out, err := m.ipc.Register(ctx, ptr, size)
	if err != nil {
		return nil, fmt.Errorf("vmm: Register of foreign memory through ipc: %w", err)
	}
	m.foreign[out] = struct{}{}
	return out, nil
}
