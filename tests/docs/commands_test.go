package docs

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/launcher"
)

// codeSnippets returns md's code: each line of a fenced or indented block,
// and each inline code span (one that wraps across lines joined by a
// space).
func codeSnippets(md string) []string {
	var out, prose []string
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "```"):
			fenced = !fenced
		case fenced:
			out = append(out, strings.TrimSpace(l))
		case strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "":
			out = append(out, strings.TrimSpace(l))
		default:
			prose = append(prose, l)
		}
	}
	for _, m := range inlineCode.FindAllStringSubmatch(strings.Join(prose, "\n"), -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// command cuts s at the first occurrence of prefix and returns the
// command from there to the end of its shell line (before a comment, a
// pipe or the next command), or false when s has none or the command holds
// a placeholder (<coll>, N, ..., $VAR) rather than a value.
func command(s, prefix string) ([]string, bool) {
	i := strings.Index(s, prefix)
	if i < 0 || (i > 0 && s[i-1] != ' ' && s[i-1] != '/' && s[i-1] != '(') {
		return nil, false
	}
	s = s[i:]
	for _, sep := range []string{" #", "|", ";", "&&", ")"} {
		if j := strings.Index(s, sep); j >= 0 {
			s = s[:j]
		}
	}
	if strings.ContainsAny(s, "<>$…") || strings.Contains(s, "...") {
		return nil, false
	}
	fields := strings.Fields(s)
	for _, f := range fields {
		if placeholder.MatchString(f) {
			return nil, false
		}
	}
	return fields, true
}

// placeholder is an argument written as its kind: N, D, FILE, PID.
var placeholder = regexp.MustCompile(`^[A-Z][A-Z_]*$`)

// checkGocclCommand parses a goccl run or goccl bench command line as the
// commands do, and a goccl bench that goccl run starts. A goccl bench
// that names no test is prose naming the command or one of its flags
// ("goccl bench --backend"), not a command line, and is not checked.
func checkGocclCommand(fields []string) error {
	args := fields[2:]
	if fields[1] == "run" {
		cfg, err := launcher.ParseArgs(args, io.Discard)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		if err != nil || filepath.Base(cfg.Program) != "goccl" || len(cfg.Args) == 0 || cfg.Args[0] != "bench" {
			return err
		}
		args = cfg.Args[1:]
	}
	if !slices.ContainsFunc(args, func(a string) bool { _, err := bench.ParseArgs([]string{a}); return err == nil }) {
		return nil
	}
	_, err := bench.ParseArgs(args)
	return err
}

func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	require.NoError(t, err)
	return append(append(pages, more...), filepath.Join(root, "README.md"), filepath.Join(root, "scripts", "gpu", "README.md"))
}

// eachSnippet calls f with every code snippet of the documents and the
// page's path from root.
func eachSnippet(t *testing.T, root string, f func(rel, snippet string)) {
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, page)
		for _, s := range codeSnippets(string(b)) {
			f(rel, s)
		}
	}
}

// TestDocumentedCommandsParse: every `goccl run` and `goccl bench` command
// line the documents give with values (and make bench's BENCH_ARGS) is one
// the commands accept.
func TestDocumentedCommandsParse(t *testing.T) {
	root := repoRoot(t)
	n := 0
	eachSnippet(t, root, func(rel, s string) {
		for _, prefix := range []string{"goccl run ", "goccl bench "} {
			fields, ok := command(s, prefix)
			if !ok {
				continue
			}
			n++
			assert.NoError(t, checkGocclCommand(fields), "%s: %q", rel, strings.Join(fields, " "))
			break // a goccl run's bench was checked with it
		}
	})
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^BENCH_ARGS\s*\?=\s*(.+)$`).FindSubmatch(mk)
	require.NotNil(t, m, "Makefile has no BENCH_ARGS")
	_, err = bench.ParseArgs(strings.Fields(string(m[1])))
	assert.NoError(t, err, "make bench's BENCH_ARGS %q", m[1])
	t.Logf("%d commands", n)
	require.Greater(t, n, 5, "the scan found too few commands to be working")
}

// TestDocumentedBenchmarksExist: every `go test -bench REGEX ./pkg` the
// documents give names a benchmark that exists in that package (its
// top-level name; the sub-benchmarks after a slash are not checked).
func TestDocumentedBenchmarksExist(t *testing.T) {
	root := repoRoot(t)
	n := 0
	eachSnippet(t, root, func(rel, s string) {
		pattern, pkgs := benchCommand(s)
		if pattern == "" {
			return
		}
		re, err := regexp.Compile(topLevel(pattern))
		if !assert.NoError(t, err, "%s: -bench %q", rel, pattern) {
			return
		}
		for _, pkg := range pkgs {
			n++
			names := benchmarks(t, filepath.Join(root, pkg))
			found := false
			for _, name := range names {
				found = found || re.MatchString(name)
			}
			assert.True(t, found, "%s: go test -bench %q %s: no such benchmark (the package has %v)", rel, pattern, pkg, names)
		}
	})
	t.Logf("%d benchmark commands", n)
	require.Greater(t, n, 5, "the scan found too few benchmarks to be working")
}

// benchCommand returns the -bench pattern and the packages (./dir) of a
// `go test` command in s.
func benchCommand(s string) (string, []string) {
	i := strings.Index(s, "go test ")
	if i < 0 {
		return "", nil
	}
	fields := strings.Fields(s[i:])
	var pattern string
	var pkgs []string
	for j := 2; j < len(fields); j++ {
		f := strings.Trim(fields[j], `'"`)
		switch {
		case f == "-bench" && j+1 < len(fields):
			pattern = strings.Trim(fields[j+1], `'"`)
			j++
		case strings.HasPrefix(f, "-bench="):
			pattern = strings.TrimPrefix(f, "-bench=")
		case strings.HasPrefix(f, "./") && !strings.Contains(f, "..."):
			pkgs = append(pkgs, strings.TrimSuffix(f, "/"))
		}
	}
	if len(pkgs) == 0 || strings.ContainsAny(pattern, "<>$") {
		return "", nil
	}
	return pattern, pkgs
}

// topLevel is the part of a -bench pattern that the benchmark functions'
// names match: what comes before the first slash outside brackets and
// parentheses.
func topLevel(pattern string) string {
	depth := 0
	for i, c := range pattern {
		switch c {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '/':
			if depth == 0 {
				return pattern[:i]
			}
		}
	}
	return pattern
}

var benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w*)\(b \*testing\.B\)`)

// benchmarks lists the Benchmark functions of dir's test files.
func benchmarks(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range benchFunc.FindAllSubmatch(b, -1) {
			names = append(names, string(m[1]))
		}
	}
	return names
}

func TestCommandExtraction(t *testing.T) {
	md := "Run `goccl run -np 2 goccl bench all_reduce -b 8\n-e 1M` and\n\n    bin/goccl run -np N ./prog   # N ranks\n    go test -run '^$' -bench 'AllReduce/ranks=(2|4)/x' ./collectives/host/\n\n```\ngoccl bench <coll> -b 1M\n```\n"
	snippets := codeSnippets(md)
	assert.Equal(t, []string{"bin/goccl run -np N ./prog   # N ranks",
		"go test -run '^$' -bench 'AllReduce/ranks=(2|4)/x' ./collectives/host/",
		"goccl bench <coll> -b 1M", "goccl run -np 2 goccl bench all_reduce -b 8 -e 1M"}, snippets)

	fields, ok := command(snippets[3], "goccl run ")
	require.True(t, ok)
	assert.Equal(t, []string{"goccl", "run", "-np", "2", "goccl", "bench", "all_reduce", "-b", "8", "-e", "1M"}, fields)
	assert.NoError(t, checkGocclCommand(fields))
	assert.Error(t, checkGocclCommand([]string{"goccl", "run", "-np", "2", "goccl", "bench", "all_reduce", "-q"}), "a bad bench flag under run")
	assert.Error(t, checkGocclCommand([]string{"goccl", "bench", "all_reduce", "-b", "1Q"}), "a bad size")
	assert.Error(t, checkGocclCommand([]string{"goccl", "run", "--np", "two", "./prog"}), "a bad run flag")
	assert.NoError(t, checkGocclCommand([]string{"goccl", "bench", "--backend"}), "prose naming a flag")
	assert.NoError(t, checkGocclCommand([]string{"goccl", "run", "-h"}))
	_, ok = command(snippets[0], "goccl run ")
	assert.False(t, ok, "N is a placeholder")
	_, ok = command(snippets[2], "goccl bench ")
	assert.False(t, ok, "<coll> is a placeholder")

	pattern, pkgs := benchCommand(snippets[1])
	assert.Equal(t, "AllReduce/ranks=(2|4)/x", pattern)
	assert.Equal(t, []string{"./collectives/host"}, pkgs)
	assert.Equal(t, "AllReduce", topLevel(pattern))
	assert.Equal(t, "A(b/c)", topLevel("A(b/c)/d"))
}
