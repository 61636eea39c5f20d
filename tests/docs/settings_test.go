package docs

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envName is a GOCCL_* variable's name inside a string: at least one
// character after the prefix, and it ends on a letter or digit, so that
// "GOCCL_TIMEOUT=%q" yields GOCCL_TIMEOUT.
var envName = regexp.MustCompile(`GOCCL_[A-Z0-9_]*[A-Z0-9]`)

// repoRoot walks up from the test's directory to the go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// codeVars returns every GOCCL_* name in a string literal of the module's
// Go sources, tests excluded, with one file that holds it. Only string
// literals count: a name in a comment is not read by anything. A literal
// that holds the bare prefix (a name built at run time) is an error, since
// no scan could then see which variables the code reads.
func codeVars(root string) (vars map[string]string, dynamic []string, err error) {
	vars = map[string]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Hidden folders (.git, carried build outputs), testdata and
			// vendored code are not the module's sources; a nested module
			// is another module.
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var bad error
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || bad != nil {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				bad = err
				return false
			}
			names := envName.FindAllString(s, -1)
			if strings.Count(s, "GOCCL_") > len(names) {
				dynamic = append(dynamic, fmt.Sprintf("%s: %q", fset.Position(lit.Pos()), s))
			}
			for _, v := range names {
				if _, seen := vars[v]; !seen {
					vars[v] = rel
				}
			}
			return true
		})
		return bad
	})
	return vars, dynamic, err
}

// pageVars returns the names in the first column of every table of
// docs/settings.md whose first header cell is "variable": `GOCCL_X` rows.
func pageVars(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	vars := map[string]bool{}
	cell := regexp.MustCompile("^\\|\\s*`(GOCCL_[A-Z0-9_]+)`")
	inTable, header := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			inTable, header = false, false
			continue
		}
		if !inTable {
			inTable = true
			first := strings.TrimSpace(strings.Split(strings.Trim(line, "|"), "|")[0])
			header = strings.EqualFold(first, "variable")
			continue
		}
		if !header {
			continue
		}
		if m := cell.FindStringSubmatch(line); m != nil {
			assert.False(t, vars[m[1]], "docs/settings.md lists %s twice", m[1])
			vars[m[1]] = true
		}
	}
	require.NoError(t, sc.Err())
	return vars
}

func sorted(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestSettingsPageListsEveryVariable: docs/settings.md and the code agree
// on the set of GOCCL_* variables.
func TestSettingsPageListsEveryVariable(t *testing.T) {
	root := repoRoot(t)
	code, dynamic, err := codeVars(root)
	require.NoError(t, err)
	assert.Empty(t, dynamic, "strings that build a GOCCL_ name at run time: spell each variable out so that docs/settings.md can be checked")
	page := pageVars(t, filepath.Join(root, "docs", "settings.md"))
	// The scan must see the variables every part of goccl reads; if it
	// sees none of these it is broken, not the page.
	for _, v := range []string{"GOCCL_DEBUG", "GOCCL_TIMEOUT", "GOCCL_TUNE", "GOCCL_COMM_ID"} {
		require.Contains(t, code, v, "the scan of the Go sources lost %s", v)
	}
	for _, v := range sorted(toSet(code)) {
		assert.True(t, page[v], "the code reads %s (%s) but docs/settings.md does not list it", v, code[v])
	}
	for _, v := range sorted(page) {
		_, ok := code[v]
		assert.True(t, ok, "docs/settings.md lists %s, which no Go source outside the tests reads", v)
	}
}

func toSet(m map[string]string) map[string]bool {
	s := map[string]bool{}
	for k := range m {
		s[k] = true
	}
	return s
}

// TestScanSeesOnlyStringLiterals checks the scanner on a module made up
// here: names in string literals count, names in comments and tests do
// not, and a name built from the bare prefix is reported.
func TestScanSeesOnlyStringLiterals(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	write("go.mod", "module example.com/m\n")
	write("a/a.go", "package a\n// GOCCL_IN_COMMENT is not read.\nconst v = \"GOCCL_READ\"\nvar e = `GOCCL_RAW=%q, GOCCL_SECOND`\n")
	write("a/a_test.go", "package a\nconst w = \"GOCCL_IN_TEST\"\n")
	write("a/testdata/x.go", "package x\nconst w = \"GOCCL_IN_TESTDATA\"\n")
	write(".hidden/h.go", "package h\nconst w = \"GOCCL_HIDDEN\"\n")
	write("sub/go.mod", "module example.com/sub\n")
	write("sub/s.go", "package s\nconst w = \"GOCCL_OTHER_MODULE\"\n")
	vars, dynamic, err := codeVars(root)
	require.NoError(t, err)
	assert.Equal(t, []string{"GOCCL_RAW", "GOCCL_READ", "GOCCL_SECOND"}, sorted(toSet(vars)))
	assert.Empty(t, dynamic)

	write("b/b.go", "package b\nfunc f(s string) string { return \"GOCCL_\" + s }\n")
	_, dynamic, err = codeVars(root)
	require.NoError(t, err)
	require.Len(t, dynamic, 1, "a name built from the bare prefix must be reported")
	assert.Contains(t, dynamic[0], "b.go")
}

// TestPageParser reads only the variable tables' first column.
func TestPageParser(t *testing.T) {
	p := filepath.Join(t.TempDir(), "settings.md")
	body := "# S\n\n| variable | default |\n|---|---|\n| `GOCCL_A` | x |\n| `GOCCL_B` | `GOCCL_C` |\n\n" +
		"text `GOCCL_D`\n\n| script setting | x |\n|---|---|\n| `GOCCL_E` | y |\n"
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	assert.Equal(t, []string{"GOCCL_A", "GOCCL_B"}, sorted(pageVars(t, p)))
}
