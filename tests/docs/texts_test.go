package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// below are the packages under comm: their errors reach the user wrapped
// by comm, which gives them "goccl: rank N: " (docs/troubleshooting.md),
// so they must not say "goccl:" themselves.
var below = []string{"collectives", "transport", "internode", "topology", "kernels", "internal"}

// The library's texts follow docs/troubleshooting.md's rule: an error of
// a package under comm does not start with "goccl:" (comm adds it once),
// and every log line of the library starts with "goccl: ".
func TestLibraryTextStyle(t *testing.T) {
	root := repoRoot(t)
	var doubled, unprefixed []string
	for _, dir := range append(append([]string{}, below...), "comm", "capi") {
		isBelow := dir != "comm" && dir != "capi"
		err := eachSource(filepath.Join(root, dir), func(path string, fset *token.FileSet, f *ast.File) {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				at := func() string {
					rel, _ := filepath.Rel(root, path)
					return rel + ":" + strconv.Itoa(fset.Position(call.Pos()).Line)
				}
				switch name := sel.Sel.Name; {
				case isBelow && isPkg(sel, "errors", "fmt") && (name == "New" || name == "Errorf"):
					if s, ok := literal(call, 0); ok && strings.HasPrefix(s, "goccl:") {
						doubled = append(doubled, at()+": "+s)
					}
				case name == "Info" || name == "Warn" || name == "Debug" || name == "Error" || name == "Log":
					i := 0
					if name == "Log" {
						i = 2 // Log(ctx, level, msg, ...)
					}
					if s, ok := literal(call, i); ok && !strings.HasPrefix(s, "goccl: ") {
						unprefixed = append(unprefixed, at()+": "+s)
					}
				}
				return true
			})
		})
		require.NoError(t, err)
	}
	assert.Empty(t, doubled, "errors below comm that say goccl: (comm says it once)")
	assert.Empty(t, unprefixed, "log lines that do not start with goccl: ")
}

// eachSource parses every non-test Go file under dir.
func eachSource(dir string, f func(path string, fset *token.FileSet, file *ast.File)) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != dir && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		f(path, fset, file)
		return nil
	})
}

// isPkg reports whether sel is a selector on one of the named packages.
func isPkg(sel *ast.SelectorExpr, pkgs ...string) bool {
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	for _, p := range pkgs {
		if id.Name == p {
			return true
		}
	}
	return false
}

// literal is call's i-th argument when it is a string literal, or a sum
// that begins with one ("goccl: "+fn+" failed").
func literal(call *ast.CallExpr, i int) (string, bool) {
	if len(call.Args) <= i {
		return "", false
	}
	e := call.Args[i]
	for {
		b, ok := e.(*ast.BinaryExpr)
		if !ok || b.Op != token.ADD {
			break
		}
		e = b.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
