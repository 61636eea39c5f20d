package comm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fuzz targets for Split's and Shrink's decoders (see fuzz_test.go for
// the properties).

func FuzzDecodeSplitRecord(f *testing.F) {
	f.Add(encodeSplitRecord(3, -7, nil))
	f.Add(encodeSplitRecord(NoColor, 0, nil))
	f.Add(encodeSplitRecord(-5, 0, errors.New("color -5")))
	f.Add(make([]byte, callRecordSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeSplitRecord(b)
		if err != nil || r.bad != "" {
			return
		}
		require.Equal(t, b, encodeSplitRecord(int(r.color), int(r.key), nil))
	})
}

func FuzzDecodeSplitOffer(f *testing.F) {
	id, err := NewUniqueID()
	require.NoError(f, err)
	f.Add(encodeSplitOffer(id, false, nil))
	f.Add(encodeSplitOffer(id, true, nil))
	f.Add(encodeSplitOffer(UniqueID{}, false, errors.New("no listener")))
	f.Add([]byte("GSP2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, pairs, err := decodeSplitOffer(b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeSplitOffer(got, pairs, nil))
	})
}

func FuzzDecodeShrinkOpen(f *testing.F) {
	f.Add(encodeShrinkOpen(roleJoin, []int{0, 3}))
	f.Add(encodeShrinkOpen(roleProbe, nil))
	f.Add([]byte{roleJoin, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		role, ex, err := decodeShrinkOpen(b, 8)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeShrinkOpen(role, ex))
	})
}

func FuzzDecodeRescueInfo(f *testing.F) {
	f.Add(encodeRescueInfo(rescueInfo{node: "host/boot", device: 3, bus: "0000:18:00.0", netMbps: 400000, addr: "127.0.0.1:4242"}))
	f.Add(encodeRescueInfo(rescueInfo{device: -1}))
	f.Add(encodeRescueInfo(rescueInfo{node: "n", addr: "[::1]:1"}))
	f.Add([]byte{200, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := decodeRescueInfo(b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeRescueInfo(in))
	})
}
