package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
