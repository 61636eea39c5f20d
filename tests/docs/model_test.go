package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internode/costmodel"
)

// modelBlock is a part of a page that `goccl model` printed: between
// "<!-- goccl model ARGS -->" and "<!-- end goccl model -->".
type modelBlock struct {
	args []string
	line int
	text string
}

var (
	modelStart = regexp.MustCompile(`^<!-- goccl model (.*) -->$`)
	modelEnd   = "<!-- end goccl model -->"
)

func modelBlocks(t *testing.T, page string) []modelBlock {
	t.Helper()
	var (
		blocks []modelBlock
		cur    *modelBlock
		body   []string
	)
	for i, line := range strings.Split(page, "\n") {
		switch m := modelStart.FindStringSubmatch(line); {
		case m != nil:
			require.Nil(t, cur, "line %d: a model block opens inside another", i+1)
			cur, body = &modelBlock{args: strings.Fields(m[1]), line: i + 1}, nil
		case line == modelEnd:
			require.NotNil(t, cur, "line %d: a model block closes that never opened", i+1)
			cur.text = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	require.Nil(t, cur, "a model block is never closed")
	return blocks
}

// TestModelTables fails when a table docs/multinode.md took from `goccl
// model` is not what the command prints today with the same arguments.
func TestModelTables(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "multinode.md"))
	require.NoError(t, err)
	blocks := modelBlocks(t, string(page))
	require.NotEmpty(t, blocks, "docs/multinode.md has no table from goccl model")
	for _, b := range blocks {
		cfg, err := costmodel.ParseArgs(b.args)
		require.NoError(t, err, "docs/multinode.md:%d", b.line)
		var out bytes.Buffer
		require.NoError(t, costmodel.Write(&out, cfg))
		// The page sets the output off with blank lines around it.
		assert.Equal(t, strings.Trim(out.String(), "\n"), strings.Trim(b.text, "\n"),
			"docs/multinode.md:%d: regenerate with goccl model %s", b.line, strings.Join(b.args, " "))
	}
}

// The block reader itself: arguments, text, and unbalanced markers.
func TestModelBlocks(t *testing.T) {
	page := "x\n<!-- goccl model --markdown --nodes 2 -->\n\na\nb\n<!-- end goccl model -->\ny\n"
	bs := modelBlocks(t, page)
	require.Len(t, bs, 1)
	assert.Equal(t, []string{"--markdown", "--nodes", "2"}, bs[0].args)
	assert.Equal(t, "\na\nb\n", bs[0].text)
	assert.Equal(t, 2, bs[0].line)
}
