package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestPathFacts: what GOCCL_CHECK compares across ranks is what tryCE looks
// at: both buffers' registrations for AllReduce and ReduceScatter (and
// whether such a call runs in place), the receive buffer's for Broadcast
// and AllGather, nothing for Reduce.
func TestPathFacts(t *testing.T) {
	bes, _, _ := newFakeBackends(t, 2, Config{})
	const count = 1000
	buf, _ := allocAll(t, bes, 4*2*count)
	reg := buf[0]
	plain := uintptr(0x7000_0000_0000) // no registration holds it
	both := collectives.PathFacts{SendRegistered: true, RecvRegistered: true}
	for _, tc := range []struct {
		name       string
		coll       collectives.Collective
		send, recv uintptr
		want       collectives.PathFacts
	}{
		{"all_reduce registered", collectives.AllReduce, reg, reg + 4*count, both},
		{"all_reduce registered in place", collectives.AllReduce, reg, reg, collectives.PathFacts{SendRegistered: true, RecvRegistered: true, InPlace: true}},
		{"all_reduce in place unregistered", collectives.AllReduce, plain, plain, collectives.PathFacts{}},
		{"all_reduce send only", collectives.AllReduce, reg, plain, collectives.PathFacts{SendRegistered: true}},
		// ReduceScatter: send holds nranks*count, recv count.
		{"reduce_scatter recv only", collectives.ReduceScatter, plain, reg, collectives.PathFacts{RecvRegistered: true}},
		{"reduce_scatter send past the registration", collectives.ReduceScatter, reg + 4*count, plain, collectives.PathFacts{}},
		{"all_gather recv", collectives.AllGather, plain, reg, collectives.PathFacts{RecvRegistered: true}},
		{"broadcast send only", collectives.Broadcast, reg, plain, collectives.PathFacts{}},
		{"reduce registered", collectives.Reduce, reg, reg + 4*count, collectives.PathFacts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := collectives.Args{Coll: tc.coll, Send: tc.send, Recv: tc.recv, Count: count, Type: collectives.Float32, Op: collectives.Sum}
			assert.Equal(t, tc.want, bes[0].PathFacts(&a))
		})
	}
}

// TestCloseFreesRegistrationsInCreationOrder: freeing is collective, so
// Close must take the registrations in an order every rank shares. The
// table is sorted by address, which differs between ranks here: rank 1's
// copies of the two buffers lie in the opposite order to rank 0's.
func TestCloseFreesRegistrationsInCreationOrder(t *testing.T) {
	bes, _, maps := newFakeBackends(t, 2, Config{})
	// Per rank, the k-th buffer's address; rank r's are offset by r<<32 in
	// the fake mapper's address space.
	ptrs := [][]uintptr{
		{0x10_0000, 0x20_0000},
		{0x30_0000 + 1<<32, 0x05_0000 + 1<<32},
	}
	sizes := []uint64{4096, 8192}
	for k, size := range sizes {
		for r, err := range together(2, func(r int) error {
			_, err := bes[r].Register(context.Background(), ptrs[r][k], size)
			return err
		}) {
			require.NoError(t, err, "rank %d, buffer %d", r, k)
		}
	}
	for r, err := range together(2, func(r int) error { return bes[r].Close() }) {
		require.NoError(t, err, "rank %d", r)
	}
	freedSizes := func(m *fakeMapper) []uint64 {
		var out []uint64
		for _, reg := range m.freed {
			if reg.Size == 4096 || reg.Size == 8192 {
				out = append(out, reg.Size)
			}
		}
		return out
	}
	want := []uint64{8192, 4096} // newest first
	assert.Equal(t, want, freedSizes(maps[0]), "rank 0")
	assert.Equal(t, want, freedSizes(maps[1]), "rank 1")
}
