package launcher

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A usage error prints the error once, prefixed, and the usage once, on
// stderr; help prints the usage once on stdout and nothing else.
func TestMainUsageOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		first string
	}{
		{"bad np", []string{"-np", "abc", "true"}, ExitConfig, `goccl run: invalid value "abc" for flag -np: parse error`},
		{"unknown flag", []string{"-np", "2", "--bogus", "true"}, ExitConfig, "goccl run: flag provided but not defined: -bogus"},
		{"missing np", []string{"true"}, ExitConfig, "goccl run: "},
		{"help", []string{"-h"}, 0, "usage: goccl run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.Equal(t, tc.code, Main(tc.args, &out, &errb))
			text, quiet := errb.String(), out.String()
			if tc.code == 0 {
				text, quiet = quiet, text
			}
			assert.True(t, strings.HasPrefix(text, tc.first), text)
			assert.Equal(t, 1, strings.Count(text, "usage: goccl run"), text)
			assert.Equal(t, 1, strings.Count(text, "flags:"), text)
			assert.Empty(t, quiet)
		})
	}
}
