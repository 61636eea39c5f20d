package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bench"
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

// Every command built on newCommand reads as run, bench, info and model
// do: -h prints the help (synopsis, what it does, flags) on stdout and
// exits 0; a bad command line prints "goccl NAME: " and the error, then the
// help, once, on stderr, and exits 2.
func TestCommandHelpStyle(t *testing.T) {
	cmds := map[string]func(args []string, stdout, stderr *bytes.Buffer) int{
		"trace":   func(a []string, o, e *bytes.Buffer) int { return traceCmd(a, o, e) },
		"dump":    func(a []string, o, e *bytes.Buffer) int { return dumpCmd(a, o, e) },
		"plot":    func(a []string, o, e *bytes.Buffer) int { return plotCmd(a, o, e) },
		"version": func(a []string, o, e *bytes.Buffer) int { return versionMain(a, o, e) },
	}
	for _, tc := range []struct {
		cmd   string
		args  []string
		code  int
		first string // how the output begins
		flags bool   // the help lists flags
	}{
		{"trace", []string{"-h"}, 0, "usage: goccl trace [-o trace.json]", true},
		{"trace", []string{"--help"}, 0, "usage: goccl trace [-o trace.json]", true},
		{"trace", []string{"--bogus"}, 2, "goccl trace: flag provided but not defined: -bogus", true},
		{"trace", nil, 2, "goccl trace: name at least one RECORD.json", true},
		{"dump", []string{"-h"}, 0, "usage: goccl dump [-dir D]", true},
		{"dump", []string{"-timeout", "soon", "1"}, 2, `goccl dump: invalid value "soon" for flag -timeout`, true},
		{"dump", nil, 2, "goccl dump: name one PID", true},
		{"dump", []string{"zero"}, 2, `goccl dump: PID "zero" is not a process id`, true},
		{"plot", []string{"-h"}, 0, "usage: goccl plot -o FILE.png", true},
		{"plot", []string{"x.json"}, 2, "goccl plot: name the plot to write with -o FILE", true},
		{"plot", []string{"-o", "x.png"}, 2, "goccl plot: name at least one RUN.json", true},
		{"version", []string{"-h"}, 0, "usage: goccl version", false},
		{"version", []string{"x"}, 2, `goccl version: unexpected arguments ["x"]`, false},
	} {
		t.Run(tc.cmd+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tc.code, cmds[tc.cmd](tc.args, &out, &errb))
			text, quiet := out.String(), errb.String()
			if tc.code != 0 {
				text, quiet = quiet, text
			}
			assert.Empty(t, quiet)
			assert.True(t, strings.HasPrefix(text, tc.first), text)
			assert.Equal(t, 1, strings.Count(text, "usage: goccl "+tc.cmd), text)
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tc.flags], strings.Count(text, "\nflags:\n"), text)
			assert.NotContains(t, text, "goccl "+tc.cmd+": goccl", "a doubled prefix")
		})
	}
}

// goccl bench's help and usage errors read as the other commands': help
// on stdout, an error then the usage, once, on stderr.
func TestBenchUsageStyle(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		code  int
		first string
	}{
		{[]string{"-h"}, 0, "usage: goccl bench <all_reduce|"},
		{[]string{"all_reduce", "--help"}, 0, "usage: goccl bench <all_reduce|"},
		{[]string{"all_reduce", "-q"}, 2, "goccl bench: flag provided but not defined: -q\nusage: goccl bench"},
		{[]string{"bogus"}, 2, `goccl bench: unknown collective: "bogus" (want all_reduce,`},
	} {
		var out, errb bytes.Buffer
		_, code, ok := benchArgs(tc.args, &out, &errb)
		require.False(t, ok, "%v", tc.args)
		require.Equal(t, tc.code, code, "%v", tc.args)
		text, quiet := errb.String(), out.String()
		if tc.code == 0 {
			text, quiet = quiet, text
		}
		assert.Empty(t, quiet, "%v", tc.args)
		assert.True(t, strings.HasPrefix(text, tc.first), "%v: %s", tc.args, text)
		assert.Equal(t, 1, strings.Count(text, "usage: goccl bench"), "%v", tc.args)
		assert.NotContains(t, text, "\n\nusage:", "%v: no blank line before the usage", tc.args)
	}
	cfg, code, ok := benchArgs([]string{"broadcast", "-b", "1K"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.True(t, ok)
	assert.Equal(t, 0, code)
	assert.Equal(t, int64(1024), cfg.MinBytes)
}

// goccl help NAME is NAME's -h; an unknown name is a usage error.
func TestDispatchHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"help"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"help", "version"}, 0},
		{[]string{"help", "nope"}, 2},
		{[]string{"nope"}, 2},
		{[]string{"--version"}, 0},
	} {
		assert.Equal(t, tc.code, dispatch(tc.args[0], tc.args[1:]), "%v", tc.args)
	}
}

// goccl bench's errors say what is wrong after one "goccl bench: ", with
// neither the bench package's "usage: " nor the library's "goccl: ".
func TestBenchMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown collective: "bogus" (want all_reduce, broadcast, reduce_scatter, all_gather, reduce, sendrecv, alltoall, gather, scatter)`},
		{nil, "name a test (all_reduce, broadcast, reduce_scatter, all_gather, reduce, sendrecv, alltoall, gather, scatter)"},
		{[]string{"all_reduce", "-d", "float7"}, `-d: unknown datatype: "float7"`},
		{[]string{"all_reduce", "-o", "xor"}, `-o: unknown reduction op: "xor"`},
		{[]string{"all_reduce", "-b", "1X"}, `-b: invalid size "1X"`},
		{[]string{"all_reduce", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		_, err := bench.ParseArgs(tc.args)
		require.Error(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, benchMsg(err), "%v", tc.args)
	}
}
