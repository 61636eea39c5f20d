package comm

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseProcAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"0100007F:1F90", "127.0.0.1:8080", true},
		{"00000000000000000000000001000000:0016", "[::1]:22", true},
		{"0000000000000000FFFF00000100007F:D431", "127.0.0.1:54321", true}, // v4-mapped
		{"0100007F", "", false},
		{"zz00007F:0050", "", false},
	} {
		got, ok := parseProcAddr(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			assert.Equal(t, netip.MustParseAddrPort(tc.want), got, tc.in)
		}
	}
}

// A loopback connection's other end is found, owned by this process's user.
func TestTCPPeerUID(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	uid, ok := tcpPeerUID(s)
	require.True(t, ok, "the dialer's socket is in /proc/net/tcp")
	assert.Equal(t, uint32(os.Getuid()), uid)
}
