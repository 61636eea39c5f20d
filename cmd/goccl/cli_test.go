package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology/topotest"
)

func TestVersionLine(t *testing.T) {
	tail := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "goccl devel" + tail},
		{"work tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "goccl devel" + tail},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, "goccl v0.3.1" + tail},
		{"revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}},
			"goccl devel (0123456789ab, modified)" + tail},
	} {
		assert.Equal(t, tc.want, versionLine(tc.info), tc.name)
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 0, versionMain(nil, &out, &errb))
	assert.True(t, strings.HasPrefix(out.String(), "goccl "), out.String())
	assert.Equal(t, 2, versionMain([]string{"x"}, &out, &errb))
	assert.Contains(t, errb.String(), "usage: goccl version")
}

// info's help and errors read as run's and bench's: a "usage: goccl info"
// synopsis, once, and errors prefixed "goccl info: ".
func TestInfoUsageStyle(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, infoCmd([]string{"--help"}, &out, &errb))
	assert.True(t, strings.HasPrefix(out.String(), "usage: goccl info [--json]\n"), out.String())
	assert.Contains(t, out.String(), "\nflags:\n  --json")
	assert.Empty(t, errb.String())

	out.Reset()
	require.Equal(t, 2, infoCmd([]string{"--bogus"}, &out, &errb))
	assert.True(t, strings.HasPrefix(errb.String(), "goccl info: flag provided but not defined: -bogus\nusage: goccl info"), errb.String())
	assert.Equal(t, 1, strings.Count(errb.String(), "usage:"), errb.String())
	assert.Empty(t, out.String())
}

// Without GPUs, info lists only what the host backend runs, and says a
// forced GPU algorithm would be rejected.
func TestInfoNoGPUAlgorithms(t *testing.T) {
	out := render(t, topotest.NoGPU(), false, env())
	assert.Contains(t, out, "\nalgorithms: oneshot, twoshot; chosen per call by collective, size and rank count\n")
	for _, a := range []string{"ll", "ce", "nvls"} {
		assert.NotContains(t, out, ", "+a)
	}
	out = render(t, topotest.NoGPU(), false, env("GOCCL_ALGO", "ll"))
	assert.Contains(t, out, "algorithms: oneshot, twoshot; GOCCL_ALGO=ll is a GPU algorithm: the host backend rejects it\n")
	out = render(t, topotest.NoGPU(), false, env("GOCCL_ALGO", "twoshot"))
	assert.Contains(t, out, "forced by GOCCL_ALGO=twoshot\n")
	out = render(t, topotest.H200x2(), false, ourGPUBox)
	assert.Contains(t, out, "algorithms: oneshot, twoshot, ll, ce, nvls;")
}
