package gpu

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// zcOps are rank r's writes to its zero-copy table, in order.
func zcOps(be *Backend, d *fakeDriver) []fakeOp {
	var out []fakeOp
	for _, o := range d.opsOf() {
		if o.stream == be.zc.stream {
			out = append(out, o)
		}
	}
	return out
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// A registration enters every rank's table at its number: the peers'
// copies (as Alloc returned them to the peers) before the tag, on the
// table's own stream; Close clears the tag; a registration whose entry a
// live one holds stays out of it.
func TestP2PZeroCopyTable(t *testing.T) {
	const n = 3
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	ptrs, regs := allocAll(t, bes, 1<<20)
	for r, be := range bes {
		require.NotZero(t, be.zc.dev, "rank %d", r)
		want := make([]byte, zcEntryBytes-8)
		for p := range n {
			if p != r {
				binary.LittleEndian.PutUint64(want[8*p:], uint64(ptrs[p]))
			}
		}
		entry := uintptr(be.zc.dev) + 1*zcEntryBytes
		assert.Equal(t, []fakeOp{
			{kind: "memset8", stream: be.zc.stream, dst: uintptr(be.zc.dev), n: zcSlots * zcEntryBytes},
			{kind: "htod", stream: be.zc.stream, dst: entry + 8, n: zcEntryBytes - 8, data: want},
			{kind: "htod", stream: be.zc.stream, dst: entry, n: 4, data: le32(1)},
		}, zcOps(be, drvs[r]), "rank %d", r)
	}
	// Registration 1025 would take registration 1's entry.
	forgetOps(drvs)
	for _, be := range bes {
		be.regSeq = 1024
	}
	_, late := allocAll(t, bes, 4096)
	for r, be := range bes {
		assert.Empty(t, zcOps(be, drvs[r]), "rank %d", r)
		assert.False(t, late[r].(*registration).zcSlot)
		assert.Equal(t, uint64(1), be.zc.owner[1])
	}
	forgetOps(drvs)
	for r, err := range together(n, func(r int) error { return regs[r].Close(context.Background()) }) {
		require.NoError(t, err, "rank %d", r)
	}
	for r, be := range bes {
		assert.Equal(t, []fakeOp{{kind: "htod", stream: be.zc.stream, dst: uintptr(be.zc.dev) + zcEntryBytes, n: 4, data: le32(0)}},
			zcOps(be, drvs[r]), "rank %d", r)
		assert.Zero(t, be.zc.owner[1])
	}
	for r, err := range together(n, func(r int) error { return late[r].Close(context.Background()) }) {
		require.NoError(t, err, "rank %d", r)
	}
	for r, be := range bes {
		require.NoError(t, be.Close())
		assert.Zero(t, drvs[r].devAllocs, "rank %d: the table is freed", r)
	}
}

// A Recv offers zero copy (its registration's number and its offset in it)
// from the threshold up, inside a registration only; Sends carry their
// data; the launch names the table.
func TestP2PZeroCopyOffer(t *testing.T) {
	cases := []struct {
		name string
		tune string
		zcAt int // bytes from which a registered Recv offers
	}{
		{"default", "", defaultP2PZC},
		{"lower", "p2pzc=4K", 4 << 10},
		{"off", "p2pzc=0", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvTune, c.tune)
			bes, drvs, _ := newFakeBackends(t, 2, Config{})
			ptrs, _ := allocAll(t, bes, 1<<20)
			be, d := bes[0], drvs[0]
			f32 := collectives.Float32
			recv := func(buf uintptr, count int) collectives.P2P {
				return collectives.P2P{Kind: collectives.RecvOp, Peer: 1, Buf: buf, Count: count, Type: f32, Stream: 0x55}
			}
			reg := ptrs[0]
			g := &collectives.Group{P2P: []collectives.P2P{
				recv(reg+4096, 64<<10/4),       // 64 KiB at offset 4096
				recv(reg+8192, 4<<10/4),        // 4 KiB
				recv(reg+1<<20-16, 4),          // up to the registration's end
				recv(reg+1<<20-16, 8),          // past it
				recv(0x7700_0000_0000, 64<<10), // not registered
				recv(reg, 1000),                // 4000 bytes: below every threshold
				{Kind: collectives.SendOp, Peer: 1, Buf: 0x6600_0000_0000, Count: 70000, Type: f32, Stream: 0x55},
			}}
			require.NoError(t, be.RunGroup(context.Background(), g))
			require.Len(t, d.launches, 1)
			q := d.launches[0].params
			assert.Equal(t, uint64(be.zc.dev), u64at(q, offP2PZCTable))
			offer := func(off uintptr, bytes int) uint64 {
				if c.zcAt == 0 || bytes < c.zcAt {
					return 0
				}
				return 1<<40 | uint64(off)
			}
			// The send lane first, then the recv lane in group order.
			want := [][3]uint64{
				{0x6600_0000_0000, 0, 280000},
				{offer(4096, 64<<10), uint64(reg + 4096), 64 << 10},
				{offer(8192, 4<<10), uint64(reg + 8192), 4 << 10},
				{offer(1<<20-16, 16), uint64(reg + 1<<20 - 16), 16},
				{0, uint64(reg + 1<<20 - 16), 32},
				{0, 0x7700_0000_0000, 256 << 10},
				{offer(0, 4000), uint64(reg), 4000},
			}
			for i, w := range want {
				o := offP2POps + 24*i
				assert.Equal(t, w, [3]uint64{u64at(q, o), u64at(q, o+8), u64at(q, o+16)}, "op %d", i)
			}
		})
	}
}

// A group's point-to-point launches time it in the slot of its last
// numbered call: all of it when it has no collective, its end after its
// collectives' kernels; a plain group of Sends and Recvs is not timed.
func TestP2PStamps(t *testing.T) {
	const slots = 16
	f32 := collectives.Float32
	pair := func(count int) []collectives.P2P {
		return []collectives.P2P{
			{Kind: collectives.SendOp, Peer: 1, Buf: 0x6600_0000_0000, Count: count, Type: f32, Stream: 0x55},
			{Kind: collectives.RecvOp, Peer: 1, Buf: 0x6700_0000_0000, Count: count, Type: f32, Stream: 0x55},
		}
	}
	long := pair(10)
	for range p2pLaneOps {
		long = append(long, long[0])
	}
	cases := []struct {
		name  string
		group collectives.Group
		seq   uint64   // the slot's number, 0: none
		flags []uint64 // per launch
	}{
		{"plain", collectives.Group{P2P: pair(10)}, 0, []uint64{7}},
		{"numbered", collectives.Group{Kind: collectives.GatherGroup, Seq: 8, P2P: pair(10)}, 8, []uint64{7}},
		{"after collectives", collectives.Group{Seq: 5, Colls: []collectives.Args{
			ar(100<<10, f32, collectives.Sum, 0x55, 5), ar(100<<10, f32, collectives.Sum, 0x55, 6)}, P2P: pair(10)}, 6, []uint64{5}},
		{"two launches", collectives.Group{Seq: 9, Kind: collectives.GatherGroup, P2P: long}, 9, []uint64{3, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: slots})
			be, d := bes[0], drvs[0]
			g := c.group
			require.NoError(t, be.RunGroup(context.Background(), &g))
			var flags []uint64
			for _, l := range d.launches {
				if l.name != "goccl_p2p" {
					continue
				}
				flags = append(flags, u64at(l.params, offP2PStamp))
				slot := uint64(0)
				if c.seq != 0 {
					slot = uint64(be.stamps.dev) + c.seq%slots*stampBytes
				}
				assert.Equal(t, slot, u64at(l.params, offStamp))
				assert.Equal(t, c.seq, u64at(l.params, offSeq))
			}
			assert.Equal(t, c.flags, flags)
		})
	}
}
