package host

import "encoding/binary"

// Byte sums wrap identically for int8 and uint8, so both run eight lanes
// per 64-bit word (SWAR): add the low seven bits of each lane, then fix
// each lane's top bit with an xor, so no carry crosses a lane.

const laneTops = 0x8080808080808080

func swarAdd(a, b uint64) uint64 {
	return ((a &^ laneTops) + (b &^ laneTops)) ^ ((a ^ b) & laneTops)
}

func sumBytes2(d, x, y []uint8) {
	le := binary.LittleEndian
	y, d = y[:len(x)], d[:len(x)]
	i := 0
	for ; i+8 <= len(x); i += 8 {
		le.PutUint64(d[i:], swarAdd(le.Uint64(x[i:]), le.Uint64(y[i:])))
	}
	for ; i < len(x); i++ {
		d[i] = x[i] + y[i]
	}
}

func sumBytesIn(d, x []uint8) {
	le := binary.LittleEndian
	d = d[:len(x)]
	i := 0
	for ; i+8 <= len(x); i += 8 {
		le.PutUint64(d[i:], swarAdd(le.Uint64(d[i:]), le.Uint64(x[i:])))
	}
	for ; i < len(x); i++ {
		d[i] += x[i]
	}
}
