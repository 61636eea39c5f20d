package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format of the TCP bootstrap. A connection opens with a fixed-size
// hello (no length field, so a stranger cannot make us allocate), then
// carries length-prefixed frames whose size is capped. Every decoder here
// is a pure function over bytes and has a fuzz target.

// protocolVersion changes whenever the wire format does.
const protocolVersion = 2

// helloSize is the fixed size of the opening message:
//
//	magic u64 | version u32 | nranks u32 | rank u32 | pid u32 | 8 zero bytes
const helloSize = 32

// maxRanks bounds nranks on the wire (one node: far fewer in practice).
const maxRanks = 1 << 12

type hello struct {
	Magic   uint64
	Version uint32
	NRanks  uint32
	Rank    uint32
	PID     uint32
}

func encodeHello(h hello) [helloSize]byte {
	var b [helloSize]byte
	binary.BigEndian.PutUint64(b[0:], h.Magic)
	binary.BigEndian.PutUint32(b[8:], h.Version)
	binary.BigEndian.PutUint32(b[12:], h.NRanks)
	binary.BigEndian.PutUint32(b[16:], h.Rank)
	binary.BigEndian.PutUint32(b[20:], h.PID)
	return b
}

// errMalformed marks bytes that are not our protocol.
var errMalformed = errors.New("malformed bootstrap message")

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize {
		return hello{}, fmt.Errorf("%w: hello of %d bytes, want %d", errMalformed, len(b), helloSize)
	}
	for _, x := range b[24:] {
		if x != 0 {
			return hello{}, fmt.Errorf("%w: hello reserved bytes not zero", errMalformed)
		}
	}
	return hello{
		Magic:   binary.BigEndian.Uint64(b[0:]),
		Version: binary.BigEndian.Uint32(b[8:]),
		NRanks:  binary.BigEndian.Uint32(b[12:]),
		Rank:    binary.BigEndian.Uint32(b[16:]),
		PID:     binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// Frame kinds.
const (
	kindWelcome   = 1 // root -> peer: the job formed; payload: every rank's pid
	kindReject    = 2 // root -> peer: init failed; payload: the message
	kindContrib   = 3 // peer -> root: AllGather contribution
	kindResult    = 4 // root -> peer: AllGather result (packed)
	kindHeartbeat = 5 // both ways, empty
	kindFailed    = 6 // rank u32 + message: that rank failed (relay, or self-abort)
	kindBye       = 7 // a clean Close, not a failure; payload: closedNote
	kindClosed    = 8 // root -> peer: relays another peer's goodbye; payload: closedNote
	kindRecord    = 9 // both ways, root relays: rank u32 + that rank's flight record (bootrecord.go)
	numKinds      = 10
)

var kindNames = [numKinds]string{"?", "welcome", "reject", "contrib", "result", "heartbeat", "failed", "bye", "closed", "record"}

// frameHeaderSize: length u32 | kind u8 | 3 zero bytes | seq u32.
const frameHeaderSize = 12

// maxFrame caps a frame's payload: bootstrap messages are small (handles,
// addresses, facts); an AllGather result of all ranks must fit.
const maxFrame = 16 << 20

// maxMessage caps an error or failure text.
const maxMessage = 4096

type frameHeader struct {
	Len  uint32
	Kind uint8
	Seq  uint32
}

func encodeHeader(h frameHeader) [frameHeaderSize]byte {
	var b [frameHeaderSize]byte
	binary.BigEndian.PutUint32(b[0:], h.Len)
	b[4] = h.Kind
	binary.BigEndian.PutUint32(b[8:], h.Seq)
	return b
}

func decodeHeader(b []byte) (frameHeader, error) {
	if len(b) != frameHeaderSize {
		return frameHeader{}, fmt.Errorf("%w: header of %d bytes", errMalformed, len(b))
	}
	h := frameHeader{Len: binary.BigEndian.Uint32(b[0:]), Kind: b[4], Seq: binary.BigEndian.Uint32(b[8:])}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return h, fmt.Errorf("%w: header reserved bytes not zero", errMalformed)
	}
	if h.Kind == 0 || h.Kind >= numKinds {
		return h, fmt.Errorf("%w: frame kind %d", errMalformed, h.Kind)
	}
	if h.Len > maxFrame {
		return h, fmt.Errorf("%w: %s frame of %d bytes exceeds %d", errMalformed, kindNames[h.Kind], h.Len, maxFrame)
	}
	return h, nil
}

// readChunk bounds what one read allocates ahead of the bytes arriving, so
// a peer that claims a large frame and sends little costs little.
const readChunk = 64 << 10

// readFrame reads one frame. hdr is scratch space of frameHeaderSize bytes.
func readFrame(r io.Reader, hdr []byte) (frameHeader, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:frameHeaderSize]); err != nil {
		return frameHeader{}, nil, err
	}
	h, err := decodeHeader(hdr[:frameHeaderSize])
	if err != nil {
		return h, nil, err
	}
	if h.Len == 0 {
		return h, nil, nil
	}
	n := int(h.Len)
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		step := min(n-len(buf), readChunk)
		if cap(buf)-len(buf) < step {
			nb := make([]byte, len(buf), min(n, 2*cap(buf)+step))
			copy(nb, buf)
			buf = nb
		}
		got, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+got]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return h, nil, fmt.Errorf("%s frame truncated at %d of %d bytes: %w", kindNames[h.Kind], len(buf), n, err)
		}
	}
	return h, buf, nil
}

// appendFrame appends a whole frame to dst.
func appendFrame(dst []byte, kind uint8, seq uint32, payload []byte) []byte {
	hb := encodeHeader(frameHeader{Len: uint32(len(payload)), Kind: kind, Seq: seq})
	dst = append(dst, hb[:]...)
	return append(dst, payload...)
}

// packed: n u32, then n times (len u32, bytes). Used for AllGather results.
func encodePacked(parts [][]byte) []byte {
	size := 4
	for _, p := range parts {
		size += 4 + len(p)
	}
	out := make([]byte, 4, size)
	binary.BigEndian.PutUint32(out, uint32(len(parts)))
	for _, p := range parts {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}

// decodePacked splits a packed payload of exactly n parts. The parts alias
// b but have their capacity clipped, so appending to one cannot clobber
// the next.
func decodePacked(b []byte, n int) ([][]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: packed payload of %d bytes", errMalformed, len(b))
	}
	if got := binary.BigEndian.Uint32(b); uint64(got) != uint64(n) {
		return nil, fmt.Errorf("%w: packed payload has %d parts, want %d", errMalformed, got, n)
	}
	b = b[4:]
	out := make([][]byte, n)
	for i := range out {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: packed part %d truncated", errMalformed, i)
		}
		l := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: packed part %d claims %d bytes, %d left", errMalformed, i, l, len(b))
		}
		out[i] = b[:l:l]
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after packed parts", errMalformed, len(b))
	}
	return out, nil
}

// Welcome payload: nranks pids (u32 each) | fd-socket nonce u64.
func encodeWelcome(pids []int32, nonce uint64) []byte {
	out := make([]byte, 0, 4*len(pids)+8)
	for _, p := range pids {
		out = binary.BigEndian.AppendUint32(out, uint32(p))
	}
	return binary.BigEndian.AppendUint64(out, nonce)
}

func decodeWelcome(b []byte, n int) ([]int32, uint64, error) {
	if len(b) != 4*n+8 {
		return nil, 0, fmt.Errorf("%w: welcome of %d bytes for %d ranks", errMalformed, len(b), n)
	}
	pids := make([]int32, n)
	for i := range pids {
		pids[i] = int32(binary.BigEndian.Uint32(b[4*i:]))
		if pids[i] <= 0 {
			return nil, 0, fmt.Errorf("%w: welcome: rank %d has pid %d", errMalformed, i, pids[i])
		}
	}
	return pids, binary.BigEndian.Uint64(b[4*n:]), nil
}

// Failed payload: rank u32 | message.
func encodeFailed(rank int, msg string) []byte {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(rank))
	return append(out, msg...)
}

func decodeFailed(b []byte, nranks int) (int, string, error) {
	if nranks < 1 {
		return 0, "", fmt.Errorf("%w: failure notice for a job of %d ranks", errMalformed, nranks)
	}
	if len(b) < 4 || len(b) > 4+maxMessage {
		return 0, "", fmt.Errorf("%w: failure notice of %d bytes", errMalformed, len(b))
	}
	r := binary.BigEndian.Uint32(b)
	if uint64(r) >= uint64(nranks) {
		return 0, "", fmt.Errorf("%w: failure notice names rank %d of %d", errMalformed, r, nranks)
	}
	return int(r), printable(b[4:]), nil
}

// Closed note: rank u32 | calls u64, the calls that rank made before it
// closed its communicator cleanly.
const closedNoteSize = 12

func encodeClosed(rank int, calls uint64) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, closedNoteSize), uint32(rank))
	return binary.BigEndian.AppendUint64(out, calls)
}

func decodeClosed(b []byte, nranks int) (int, uint64, error) {
	if len(b) != closedNoteSize {
		return 0, 0, fmt.Errorf("%w: closed note of %d bytes", errMalformed, len(b))
	}
	r := binary.BigEndian.Uint32(b)
	if uint64(r) >= uint64(nranks) {
		return 0, 0, fmt.Errorf("%w: closed note names rank %d of %d", errMalformed, r, nranks)
	}
	return int(r), binary.BigEndian.Uint64(b[4:]), nil
}

func decodeReject(b []byte) (string, error) {
	if len(b) > maxMessage {
		return "", fmt.Errorf("%w: reject message of %d bytes", errMalformed, len(b))
	}
	return printable(b), nil
}

// printable keeps peer-supplied text from injecting control characters
// into our logs and errors.
func printable(b []byte) string {
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}
