package comm

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func fakeIfaces() []netIface {
	a := netip.MustParseAddr
	return []netIface{
		{name: "lo", up: true, addrs: []netip.Addr{a("::1"), a("127.0.0.1")}},
		{name: "docker0", up: true, addrs: []netip.Addr{a("172.17.0.1")}},
		{name: "eth0", up: false, addrs: []netip.Addr{a("10.0.0.9")}},
		{name: "eth1", up: true, addrs: []netip.Addr{a("fe80::1"), a("fd00::7")}},
		{name: "eth10", up: true, addrs: []netip.Addr{a("10.1.0.10")}},
		{name: "ib0", up: true, addrs: []netip.Addr{a("fe80::2"), a("192.168.5.5")}},
		{name: "ib1", up: true},
	}
}

func TestChooseIface(t *testing.T) {
	for _, tc := range []struct {
		spec, name, addr string
	}{
		{"lo", "lo", "127.0.0.1"},                   // IPv4 before IPv6, whatever the order
		{"eth", "eth1", "fd00::7"},                  // eth0 is down; link-local skipped
		{"eth1", "eth1", "fd00::7"},                 // a prefix: eth1 before eth10
		{"=eth10", "eth10", "10.1.0.10"},            // exact
		{"=eth", "", ""},                            // exact: no interface is named eth
		{"ib,eth", "eth1", "fd00::7"},               // the system's order, not the list's
		{"^lo,docker", "eth1", "fd00::7"},           // exclude
		{"^=lo,docker0,eth1", "eth10", "10.1.0.10"}, // exclude exact names
		{"^=eth", "lo", "127.0.0.1"},                // excludes nothing
		{" ib0 , ", "ib0", "192.168.5.5"},           // spaces and empty items
		{"ib1", "", ""},                             // no address
		{"wlan", "", ""},
		{"^lo,docker,eth,ib", "", ""},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			a, name, err := chooseIface(tc.spec, fakeIfaces())
			if tc.name == "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
				for _, want := range []string{ifnameVar, `"` + tc.spec + `"`, "lo 127.0.0.1", "eth0 10.0.0.9, down", "ib1 no usable address"} {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.name, name)
			assert.Equal(t, netip.MustParseAddr(tc.addr), a)
		})
	}
}

func TestParseIfPatternRejectsEmpty(t *testing.T) {
	for _, spec := range []string{"^", "=", "^=", ",", " , "} {
		_, err := parseIfPattern(spec)
		require.Error(t, err, spec)
		assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
		assert.Contains(t, err.Error(), ifnameVar)
	}
}

// realLoopback is this machine's loopback interface and its IPv4
// address, or skips.
func realLoopback(t *testing.T) (string, netip.Addr) {
	t.Helper()
	ifs, err := systemIfaces()
	require.NoError(t, err)
	for _, ifc := range ifs {
		if ifc.name != "lo" || !ifc.up {
			continue
		}
		for _, a := range ifc.addrs {
			if a.Is4() {
				return ifc.name, a
			}
		}
	}
	t.Skip("no loopback interface named lo with an IPv4 address")
	return "", netip.Addr{}
}

func TestUniqueIDAddrFromInterface(t *testing.T) {
	name, want := realLoopback(t)
	for _, spec := range []string{name, "=" + name} {
		id, err := newUniqueIDOn(spec)
		require.NoError(t, err, spec)
		assert.Equal(t, want, id.Addr().Addr(), spec)
		assert.NotZero(t, id.Addr().Port())
	}
	// Where the machine has another interface, the id takes its address,
	// not the loopback default.
	ifs, err := systemIfaces()
	require.NoError(t, err)
	for _, ifc := range ifs {
		if a, ok := usableAddr(ifc); ok && ifc.up && ifc.name != name {
			id, err := newUniqueIDOn("=" + ifc.name)
			require.NoError(t, err, ifc.name)
			assert.Equal(t, a, id.Addr().Addr(), ifc.name)
			break
		}
	}
	// A name no interface has.
	_, err = newUniqueIDOn("=goccl-no-such-if0")
	require.Error(t, err)
	assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `GOCCL_SOCKET_IFNAME="=goccl-no-such-if0"`)
	assert.Contains(t, err.Error(), name+" "+want.String())
}

func TestSocketIfnameSettingFailsInit(t *testing.T) {
	_, err := InitAll(context.Background(), []int{0, 1}, Options{Backend: BackendHost, Logger: discardLogger(),
		Env: map[string]string{ifnameVar: "=goccl-no-such-if0"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), ifnameVar)
}

func TestRescueListensOnChosenInterface(t *testing.T) {
	name, want := realLoopback(t)
	comms := hostCommsEnv(t, 2, map[string]string{ifnameVar: name})
	for _, c := range comms {
		require.NotNil(t, c.rescue.hub, "rank %d: %s", c.rank, c.rescue.why)
		ap := c.rescue.hub.ln.Addr().(*net.TCPAddr).AddrPort()
		assert.Equal(t, want, ap.Addr().Unmap(), "rank %d", c.rank)
	}
}
