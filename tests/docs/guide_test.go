package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// guideBlock is a code block of docs/guide.md that says which Example it
// comes from, with a line "<!-- example: PKGDIR ExampleName -->" before it.
type guideBlock struct {
	dir, name string
	line      int
	code      []string
}

var exampleMarker = regexp.MustCompile(`^<!-- example: (\S+) (Example\w*) -->$`)

func guideBlocks(t *testing.T, path string) []guideBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		blocks []guideBlock
		cur    *guideBlock
		want   *guideBlock // marker seen, block not opened yet
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code = append(cur.code, line)
		case want != nil && strings.HasPrefix(line, "```go"):
			cur, want = want, nil
		case want != nil:
			t.Errorf("docs/guide.md:%d: the example marker is not followed by a ```go block", want.line)
			want = nil
		}
		if m := exampleMarker.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			want = &guideBlock{dir: m[1], name: m[2], line: n}
		}
	}
	require.NoError(t, sc.Err())
	return blocks
}

// exampleBodies maps each Example function of dir's _test.go files to its
// source lines.
func exampleBodies(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, path := range files {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := src[fset.Position(fn.Body.Pos()).Offset:fset.Position(fn.Body.End()).Offset]
			out[fn.Name.Name] = strings.Split(string(body), "\n")
		}
	}
	return out
}

// normalize drops indentation and blank lines, so that a block quoted from
// inside a closure matches its source.
func normalize(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func containsRun(hay, needle []string) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		j := 0
		for j < len(needle) && hay[i+j] == needle[j] {
			j++
		}
		if j == len(needle) {
			return true
		}
	}
	return false
}

// TestGuideCodeComesFromExamples: every marked code block of docs/guide.md
// is a run of lines of the Example it names, so that the guide shows only
// code that compiles and, where the Example has an Output line, runs.
func TestGuideCodeComesFromExamples(t *testing.T) {
	root := repoRoot(t)
	blocks := guideBlocks(t, filepath.Join(root, "docs", "guide.md"))
	require.NotEmpty(t, blocks, "docs/guide.md has no example blocks")
	cache := map[string]map[string][]string{}
	for _, b := range blocks {
		if cache[b.dir] == nil {
			cache[b.dir] = exampleBodies(t, filepath.Join(root, b.dir))
		}
		body, ok := cache[b.dir][b.name]
		if !assert.True(t, ok, "docs/guide.md:%d: no %s in %s", b.line, b.name, b.dir) {
			continue
		}
		assert.True(t, containsRun(normalize(body), normalize(b.code)),
			"docs/guide.md:%d: the block is not a run of lines of %s.%s; copy it from the example again", b.line, b.dir, b.name)
	}
}

func TestContainsRun(t *testing.T) {
	hay := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		needle []string
		want   bool
	}{
		{[]string{"b", "c"}, true},
		{[]string{"a", "b", "c", "d"}, true},
		{[]string{"b", "d"}, false},
		{[]string{"d", "e"}, false},
	} {
		assert.Equal(t, tc.want, containsRun(hay, tc.needle), "%v", tc.needle)
	}
}
