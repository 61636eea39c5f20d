package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mdLink is a Markdown link or image target: ](target) or ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// localTargets returns the targets of md's links that name files of the
// repository: not URLs, not anchors within the page.
func localTargets(md string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(md, -1) {
		t := m[1]
		if strings.Contains(t, "://") || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "mailto:") {
			continue
		}
		if i := strings.IndexByte(t, '#'); i >= 0 {
			t = t[:i]
		}
		out = append(out, t)
	}
	return out
}

// TestDocumentLinksResolve: every link of README.md and docs/*.md to a
// file of the repository (a raw run, a plot, another page) names one that
// exists.
func TestDocumentLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "scripts", "gpu", "README.md"))
	n := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, page)
		for _, target := range localTargets(string(b)) {
			n++
			_, err := os.Stat(filepath.Join(filepath.Dir(page), filepath.FromSlash(target)))
			assert.NoError(t, err, "%s links to %s, which does not exist", rel, target)
		}
	}
	require.Greater(t, n, 50, "the link scan found too few links to be working")
}

func TestLocalTargets(t *testing.T) {
	md := `[a](perf/x.json) ![p](perf/y.png "plot") [web](https://example.com/z) [here](#method) [b](guide.md#errors)`
	assert.Equal(t, []string{"perf/x.json", "perf/y.png", "guide.md"}, localTargets(md))
}
