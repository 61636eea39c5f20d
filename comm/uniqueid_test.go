package comm

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUniqueIDRoundTrip(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:29500", "10.1.2.3:1", "[::1]:65535", "[fe80::1:2]:4000"} {
		t.Run(addr, func(t *testing.T) {
			ap := netip.MustParseAddrPort(addr)
			id, err := NewUniqueIDAt(ap)
			require.NoError(t, err)
			back, err := ParseUniqueID(id.String())
			require.NoError(t, err)
			assert.Equal(t, id, back)
			assert.Equal(t, ap, back.Addr())
			assert.Len(t, back.Token(), 32)
			b2, err := UniqueIDFromBytes(id[:])
			require.NoError(t, err)
			assert.Equal(t, id, b2)
		})
	}
}

func TestNewUniqueIDIsFreshAndLoopback(t *testing.T) {
	a, err := NewUniqueID()
	require.NoError(t, err)
	b, err := NewUniqueID()
	require.NoError(t, err)
	assert.NotEqual(t, a.Magic(), b.Magic())
	assert.NotEqual(t, a.Token(), b.Token())
	assert.True(t, a.Addr().Addr().IsLoopback())
	assert.NotZero(t, a.Addr().Port())
}

func TestParseUniqueIDErrors(t *testing.T) {
	good, err := NewUniqueIDAt(netip.MustParseAddrPort("127.0.0.1:1234"))
	require.NoError(t, err)
	mut := func(f func(*UniqueID)) string { id := good; f(&id); return id.String() }
	cases := []struct{ name, in, want string }{
		{"short", "abcd", "4 hex digits"},
		{"not hex", strings.Repeat("zz", 128), "invalid byte"},
		{"tag", mut(func(id *UniqueID) { id[0] = 'X' }), "tag"},
		{"format", mut(func(id *UniqueID) { id[4] = 9 }), "format 9"},
		{"family", mut(func(id *UniqueID) { id[idOffFamily] = 5 }), "family 5"},
		{"port zero", mut(func(id *UniqueID) { id[idOffPort], id[idOffPort+1] = 0, 0 }), "port 0"},
		{"reserved", mut(func(id *UniqueID) { id[127] = 1 }), "reserved"},
		{"v4 trailing", mut(func(id *UniqueID) { id[idOffAddr+10] = 1 }), "trailing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseUniqueID(c.in)
			require.ErrorIs(t, err, ErrBadUniqueID)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestIDFromEnvDerivesMagic(t *testing.T) {
	ap := netip.MustParseAddrPort("127.0.0.1:29500")
	a, err := idFromEnv(ap, "")
	require.NoError(t, err)
	b, err := idFromEnv(ap, "")
	require.NoError(t, err)
	assert.Equal(t, a, b, "every rank derives the same id")
	c, err := idFromEnv(netip.MustParseAddrPort("127.0.0.1:29501"), "")
	require.NoError(t, err)
	assert.NotEqual(t, a.Magic(), c.Magic(), "the address enters the magic")
	d, err := idFromEnv(ap, "0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	e, err := idFromEnv(ap, "fedcba9876543210fedcba9876543210")
	require.NoError(t, err)
	assert.NotEqual(t, d.Magic(), a.Magic())
	assert.NotEqual(t, d.Magic(), e.Magic(), "the job token enters the magic")
	assert.NotEqual(t, d.Token(), e.Token())
}

// The package's own readers of ids leave the "goccl: " prefix to the
// call that returns their error: a malformed rendezvous file reads as
// the bad id alone, still ErrBadUniqueID.
func TestPublishedIDErrorHasNoPrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id")
	require.NoError(t, os.WriteFile(path, []byte("ab\n"), 0o600))
	_, err := readPublishedID(path)
	require.ErrorIs(t, err, ErrBadUniqueID)
	assert.NotContains(t, err.Error(), "goccl:")
	_, err = ParseUniqueID("ab")
	require.ErrorIs(t, err, ErrBadUniqueID)
	assert.True(t, strings.HasPrefix(err.Error(), "goccl: "), "the exported call says whose error it is: %q", err)
}
