package comm

import (
	"bufio"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// tcpPeerUID finds the user that owns the other end of conn when that end
// is a socket of this machine (its row in /proc/net/tcp or tcp6, where the
// kernel lists every TCP socket of the network namespace with its owner).
// ok is false for a peer on another machine, or when the table cannot be
// read. Used at init only: a connection from another user of this machine
// is a stranger, whatever magic it knows.
func tcpPeerUID(conn net.Conn) (uid uint32, ok bool) {
	la, lok := conn.LocalAddr().(*net.TCPAddr)
	ra, rok := conn.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, false
	}
	mine, theirs := la.AddrPort(), ra.AddrPort()
	mine = netip.AddrPortFrom(mine.Addr().Unmap(), mine.Port())
	theirs = netip.AddrPortFrom(theirs.Addr().Unmap(), theirs.Port())
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := findTCPOwner(table, theirs, mine); ok {
			return uid, true
		}
	}
	return 0, false
}

// findTCPOwner returns the uid of the socket whose local address is local
// and remote address remote in one /proc/net/tcp* table.
func findTCPOwner(table string, local, remote netip.AddrPort) (uint32, bool) {
	f, err := os.Open(table)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		l, lok := parseProcAddr(fs[1])
		r, rok := parseProcAddr(fs[2])
		if !lok || !rok || l != local || r != remote {
			continue
		}
		uid, err := strconv.ParseUint(fs[7], 10, 32)
		if err != nil {
			return 0, false
		}
		return uint32(uid), true
	}
	return 0, false
}

// parseProcAddr reads "0100007F:1F90": the address as 32-bit words in the
// kernel's byte order (little endian here), then the port in hex.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), true
}
