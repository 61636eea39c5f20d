package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// model's help and errors read as info's: the synopsis once, errors
// prefixed "goccl model: " without the package's own prefix.
func TestModelUsageStyle(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, modelCmd([]string{"--help"}, &out, &errb))
	assert.True(t, strings.HasPrefix(out.String(), "usage: goccl model [flags]\n"), out.String())
	assert.Contains(t, out.String(), "\nflags:\n  --nodes LIST")
	assert.Empty(t, errb.String())

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "goccl model: flag provided but not defined: -bogus\nusage: goccl model"},
		{[]string{"--nodes", "2,0"}, "goccl model: --nodes \"0\": at least 1\nusage: goccl model"},
		{[]string{"--colls", "reduce"}, "goccl model: --colls: collective \"reduce\": want one of"},
	} {
		out.Reset()
		errb.Reset()
		require.Equal(t, 2, modelCmd(tc.args, &out, &errb), "%q", tc.args)
		assert.True(t, strings.HasPrefix(errb.String(), tc.want), errb.String())
		assert.Equal(t, 1, strings.Count(errb.String(), "usage:"), errb.String())
		assert.Empty(t, out.String())
	}
}

// The command prints the package's tables: one per collective and size.
func TestModelPrints(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, modelCmd([]string{"--nodes", "2,64", "--sizes", "1G", "--colls", "all_reduce", "--markdown"}, &out, &errb))
	assert.Empty(t, errb.String())
	assert.Contains(t, out.String(), "\nall_reduce, 1 GiB (GB/s are 1e9 bytes a second)\n")
	assert.Equal(t, 1, strings.Count(out.String(), "| nodes | ranks |"))
	assert.Contains(t, out.String(), "\n| 64 | 512 | hier., rail ring |")
}
