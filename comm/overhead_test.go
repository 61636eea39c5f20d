package comm

import (
	"context"
	"testing"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// nopBackend takes every call and does nothing, so that a benchmark
// measures the communicator's own cost up to the backend.
type nopBackend struct{ groups, ops int }

func (f *nopBackend) Run(context.Context, *collectives.Args) error { return nil }
func (f *nopBackend) RunGroup(_ context.Context, g *collectives.Group) error {
	f.groups++
	f.ops += len(g.Colls) + len(g.P2P)
	return nil
}
func (f *nopBackend) Abort(error)  {}
func (f *nopBackend) Close() error { return nil }

func nopComm(b *testing.B) (*Comm, *nopBackend) {
	be := &nopBackend{}
	opts := testOpts(&fakeFactory{})
	opts.NewBackend = func(context.Context, transport.Bootstrap, BackendConfig) (collectives.Backend, error) { return be, nil }
	comms, err := InitAll(context.Background(), []int{0, 1}, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	return comms[0], be
}

// BenchmarkSendOverhead is one Send from the call to the backend's
// RunGroup.
func BenchmarkSendOverhead(b *testing.B) {
	c, be := nopComm(b)
	buf := make([]float32, 1024)
	p := uintptr(unsafe.Pointer(&buf[0]))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(ctx, p, len(buf), Float32, 1, 0); err != nil {
			b.Fatal(err)
		}
	}
	if be.groups == 0 || be.ops != be.groups {
		b.Fatalf("backend saw %d groups of %d operations", be.groups, be.ops)
	}
}

// BenchmarkGroupOf8AllReduces records eight small AllReduces in a Group
// and runs it: the communicator's cost of a gradient bucket up to the
// backend.
func BenchmarkGroupOf8AllReduces(b *testing.B) {
	c, be := nopComm(b)
	bufs := make([]float32, 8*256)
	ctx := context.Background()
	g := NewGroup()
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < 8; i++ {
			p := uintptr(unsafe.Pointer(&bufs[i*256]))
			if err := g.AllReduce(c, p, p, 256, Float32, Sum, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := g.Run(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if be.groups == 0 || be.ops != 8*be.groups {
		b.Fatalf("backend saw %d groups of %d operations", be.groups, be.ops)
	}
}
