package comm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/goccl/goccl/collectives"
)

// UniqueIDBytes is the size of a UniqueID, as NCCL's ncclUniqueId.
const UniqueIDBytes = 128

// idTag opens every UniqueID so that a stray 128-byte blob is not taken
// for one; idFormat is bumped when the layout changes.
const (
	idTag    = "GCCL"
	idFormat = 1
)

// Layout of a UniqueID (big endian):
//
//	0..3    "GCCL"
//	4       format (1)
//	5       address family: 4 or 6
//	6..7    port
//	8..23   IP address (IPv4 in the first 4 bytes)
//	24..31  magic: opens every bootstrap connection of the job
//	32..47  token: names the job's Unix sockets
//	48..127 zero
const (
	idOffFamily = 5
	idOffPort   = 6
	idOffAddr   = 8
	idOffMagic  = 24
	idOffToken  = 32
	idOffRest   = 48
)

// UniqueID identifies one job: where rank 0 listens and the job's secret
// magic. Rank 0's side makes it with NewUniqueID and hands it to the other
// ranks (String/ParseUniqueID through an environment variable or a file).
type UniqueID [UniqueIDBytes]byte

// ErrBadUniqueID is wrapped by every UniqueID parsing error; it wraps
// collectives.ErrInvalidArgument, as every bad argument of InitRank does.
var ErrBadUniqueID = fmt.Errorf("%w: bad unique id", collectives.ErrInvalidArgument)

// NewUniqueID makes an id for a job whose rank 0 runs on this node: rank
// 0 will listen on a port that is free now, on the first address of the
// interface GOCCL_SOCKET_IFNAME names, else on the loopback (so a job
// across nodes sets it, or gives rank 0's address in GOCCL_COMM_ID). The
// port is found by binding and releasing it, so the id may be made in one
// process and used by rank 0 in another; the kernel hands ephemeral ports
// out in turn, so the window in which another program takes it is small.
func NewUniqueID() (UniqueID, error) {
	id, err := newUniqueIDOn(os.Getenv(ifnameVar))
	return id, libErr(err)
}

// newUniqueIDOn is NewUniqueID with GOCCL_SOCKET_IFNAME's value given.
func newUniqueIDOn(ifname string) (UniqueID, error) {
	ip, err := listenIP(ifname, loopback4)
	if err != nil {
		return UniqueID{}, err
	}
	l, err := listenOn(ip)
	if err != nil {
		return UniqueID{}, fmt.Errorf("reserving a bootstrap port: %w", err)
	}
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	_ = l.Close()
	return newUniqueIDAt(ap)
}

// NewUniqueIDAt makes an id for rank 0 listening at addr with a fresh
// random magic and token.
func NewUniqueIDAt(addr netip.AddrPort) (UniqueID, error) {
	id, err := newUniqueIDAt(addr)
	return id, libErr(err)
}

// newUniqueIDAt is NewUniqueIDAt for the package's own callers, whose
// errors get the prefix where they leave the package.
func newUniqueIDAt(addr netip.AddrPort) (UniqueID, error) {
	var secret [24]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return UniqueID{}, fmt.Errorf("random magic: %w", err)
	}
	var tok [16]byte
	copy(tok[:], secret[8:])
	return makeID(addr, binary.BigEndian.Uint64(secret[:8]), tok)
}

func makeID(addr netip.AddrPort, magic uint64, token [16]byte) (UniqueID, error) {
	var id UniqueID
	a := addr.Addr()
	if !a.IsValid() || addr.Port() == 0 {
		return id, fmt.Errorf("%w: address %q needs an IP and a non-zero port", ErrBadUniqueID, addr)
	}
	if a.Zone() != "" {
		return id, fmt.Errorf("%w: address %q: zones are not supported", ErrBadUniqueID, addr)
	}
	copy(id[:4], idTag)
	id[4] = idFormat
	if a.Is4() || a.Is4In6() {
		id[idOffFamily] = 4
		b := a.Unmap().As4()
		copy(id[idOffAddr:], b[:])
	} else {
		id[idOffFamily] = 6
		b := a.As16()
		copy(id[idOffAddr:], b[:])
	}
	binary.BigEndian.PutUint16(id[idOffPort:], addr.Port())
	binary.BigEndian.PutUint64(id[idOffMagic:], magic)
	copy(id[idOffToken:], token[:])
	return id, nil
}

// idFromEnv derives a job's id from a launcher's address (GOCCL_COMM_ID or
// MASTER_ADDR:MASTER_PORT). Every rank must derive the same magic without
// talking: from the launcher's job token when it sets one, else from the
// address (which differs between live jobs on one node, since two jobs
// cannot listen on one port). Not from the world size: ranks told
// different sizes must reach rank 0, which then says so at once, rather
// than be dropped as strangers until the init timeout.
func idFromEnv(addr netip.AddrPort, jobToken string) (UniqueID, error) {
	var seed []byte
	if jobToken != "" {
		seed = []byte("goccl-token:" + jobToken)
	} else {
		seed = []byte("goccl-addr:" + addr.String())
	}
	sum := sha256.Sum256(seed)
	var tok [16]byte
	copy(tok[:], sum[8:24])
	return makeID(addr, binary.BigEndian.Uint64(sum[:8]), tok)
}

// Addr is rank 0's listen address.
func (id UniqueID) Addr() netip.AddrPort {
	port := binary.BigEndian.Uint16(id[idOffPort:])
	var a netip.Addr
	if id[idOffFamily] == 4 {
		a = netip.AddrFrom4([4]byte(id[idOffAddr : idOffAddr+4]))
	} else {
		a = netip.AddrFrom16([16]byte(id[idOffAddr : idOffAddr+16]))
	}
	return netip.AddrPortFrom(a, port)
}

// Magic is the job's secret that opens every bootstrap connection.
func (id UniqueID) Magic() uint64 { return binary.BigEndian.Uint64(id[idOffMagic:]) }

// Token names the job's Unix sockets (32 hex digits).
func (id UniqueID) Token() string { return hex.EncodeToString(id[idOffToken:idOffRest]) }

// String is the id as 256 hex digits, for environment variables and files.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// ParseUniqueID reads String's output.
func ParseUniqueID(s string) (UniqueID, error) {
	id, err := parseUniqueID(s)
	return id, libErr(err)
}

// parseUniqueID is ParseUniqueID for the package's own callers.
func parseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	if len(s) != 2*UniqueIDBytes {
		return id, fmt.Errorf("%w: %d hex digits, want %d", ErrBadUniqueID, len(s), 2*UniqueIDBytes)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: %v", ErrBadUniqueID, err)
	}
	return id, id.check()
}

// UniqueIDFromBytes checks and copies a 128-byte id (as from a C caller).
func UniqueIDFromBytes(b []byte) (UniqueID, error) {
	id, err := uniqueIDFromBytes(b)
	return id, libErr(err)
}

// uniqueIDFromBytes is UniqueIDFromBytes for the package's own callers.
func uniqueIDFromBytes(b []byte) (UniqueID, error) {
	var id UniqueID
	if len(b) != UniqueIDBytes {
		return id, fmt.Errorf("%w: %d bytes, want %d", ErrBadUniqueID, len(b), UniqueIDBytes)
	}
	copy(id[:], b)
	return id, id.check()
}

func (id UniqueID) check() error {
	if string(id[:4]) != idTag {
		return fmt.Errorf("%w: tag %q, want %q", ErrBadUniqueID, id[:4], idTag)
	}
	if id[4] != idFormat {
		return fmt.Errorf("%w: format %d, want %d", ErrBadUniqueID, id[4], idFormat)
	}
	switch id[idOffFamily] {
	case 4:
		for _, b := range id[idOffAddr+4 : idOffAddr+16] {
			if b != 0 {
				return fmt.Errorf("%w: IPv4 address with trailing bytes", ErrBadUniqueID)
			}
		}
	case 6:
	default:
		return fmt.Errorf("%w: address family %d", ErrBadUniqueID, id[idOffFamily])
	}
	if binary.BigEndian.Uint16(id[idOffPort:]) == 0 {
		return fmt.Errorf("%w: port 0", ErrBadUniqueID)
	}
	for _, b := range id[idOffRest:] {
		if b != 0 {
			return fmt.Errorf("%w: reserved bytes are not zero", ErrBadUniqueID)
		}
	}
	return nil
}
