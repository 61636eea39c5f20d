package comm

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// Fuzz targets for every decoder of bytes that come from the network or
// a file. `go test` runs the seeds; `go test -fuzz=FuzzX` explores.
// Properties: no panic, bounded allocation (readFrame), and whatever
// decodes re-encodes to the same bytes.

func FuzzDecodeHello(f *testing.F) {
	good := encodeHello(hello{Magic: 0xdeadbeef, Version: protocolVersion, NRanks: 4, Rank: 3, PID: 1234})
	f.Add(good[:])
	f.Add(make([]byte, helloSize))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x00\x00\x00\x00"))
	f.Add(bytes.Repeat([]byte{0xff}, helloSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		enc := encodeHello(h)
		require.Equal(t, b, enc[:])
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, kindContrib, 7, []byte("hello")))
	f.Add(appendFrame(nil, kindHeartbeat, 0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, kindContrib, 0, 0, 0, 0, 0, 0, 1})     // 2^32-1 length
	f.Add([]byte{0x00, 0xff, 0x00, 0x00, kindResult, 0, 0, 0, 0, 0, 0, 1, 'x'}) // claims 16 MiB, sends 1
	f.Add([]byte{0, 0, 0, 1, 99, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		hdr := make([]byte, frameHeaderSize)
		h, payload, err := readFrame(bytes.NewReader(b), hdr)
		if err != nil {
			require.Nil(t, payload)
			return
		}
		require.LessOrEqual(t, len(payload), maxFrame)
		require.Equal(t, int(h.Len), len(payload))
		require.Equal(t, b[:frameHeaderSize+len(payload)], appendFrame(nil, h.Kind, h.Seq, payload))
	})
}

func FuzzDecodePacked(f *testing.F) {
	f.Add(encodePacked([][]byte{[]byte("a"), nil, []byte("ccc")}), 3)
	f.Add(encodePacked(nil), 0)
	f.Add([]byte{0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff}, 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > maxRanks {
			return
		}
		parts, err := decodePacked(b, n)
		if err != nil {
			return
		}
		require.Len(t, parts, n)
		require.Equal(t, b, encodePacked(parts))
	})
}

func FuzzDecodeWelcome(f *testing.F) {
	f.Add(encodeWelcome([]int32{10, 11, 12}, 0x0123456789abcdef), 3)
	f.Add([]byte{0, 0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > maxRanks {
			return
		}
		pids, nonce, err := decodeWelcome(b, n)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeWelcome(pids, nonce))
	})
}

func FuzzDecodeFailed(f *testing.F) {
	f.Add(encodeFailed(2, "connection closed"), 4)
	f.Add([]byte{0, 0, 0, 9}, 4)
	f.Add(append([]byte{0, 0, 0, 0}, "\x1b[31mred\xff"...), 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		r, msg, err := decodeFailed(b, n)
		if err != nil {
			return
		}
		require.True(t, r >= 0 && r < n)
		for _, c := range msg {
			require.False(t, c < 0x20 || c == 0x7f, "control character %q survived", c)
		}
	})
}

func FuzzDecodeFDMsg(f *testing.F) {
	f.Add(encodeFDMsg(fdMsg{Magic: 1, Sender: 1, NFDs: 2}))
	f.Add([]byte("GFD1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeFDMsg(b)
		if err != nil {
			return
		}
		require.LessOrEqual(t, m.NFDs, uint32(maxFDsPerMsg))
		require.Equal(t, b, encodeFDMsg(m))
	})
}

func FuzzDecodeCallRecord(f *testing.F) {
	f.Add(encodeCallRecord(callRecord{Valid: true, Coll: collectives.Reduce, Count: 10, Type: collectives.Float32, Op: collectives.Max, Root: 1}))
	f.Add(encodeCallRecord(callRecord{Valid: true, Coll: collectives.AllReduce, Count: 4, Facts: factsKnown}))
	f.Add(make([]byte, callRecordSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeCallRecord(b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeCallRecord(r))
		_ = compareCalls([]callRecord{r, r}) // must not panic on any values
	})
}

func FuzzParseUniqueID(f *testing.F) {
	id, err := NewUniqueID()
	require.NoError(f, err)
	f.Add(id.String())
	f.Add("")
	f.Add(string(bytes.Repeat([]byte("0"), 256)))
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseUniqueID(s)
		if err != nil {
			return
		}
		require.Equal(t, strings.ToLower(s), id.String()) // hex digits of either case
		require.NotZero(t, id.Addr().Port())
	})
}

// The length field is read only after a valid hello, and even then a
// claimed size costs at most readChunk before bytes arrive.
func TestReadFrameBoundsAllocation(t *testing.T) {
	hdr := make([]byte, frameHeaderSize)
	claim := make([]byte, frameHeaderSize)
	binary.BigEndian.PutUint32(claim, maxFrame)
	claim[4] = kindContrib
	allocs := testing.AllocsPerRun(10, func() {
		_, _, err := readFrame(bytes.NewReader(append(claim, 'x')), hdr)
		require.Error(t, err)
	})
	require.Less(t, allocs, 20.0)
	before := memStats()
	for i := 0; i < 100; i++ {
		_, _, _ = readFrame(bytes.NewReader(append(claim, 'x')), hdr)
	}
	require.Less(t, memStats()-before, uint64(100*(readChunk+4096)), "a 16 MiB claim must not allocate 16 MiB")
}
