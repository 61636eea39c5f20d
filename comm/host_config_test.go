package comm

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// A GPU-only algorithm or transport on the host backend fails init with
// an error that names the variable and says "host backend:" once.
func TestHostBackendRejectsGPUChoices(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"ll", map[string]string{"GOCCL_ALGO": "ll"}, "GOCCL_ALGO=ll is a GPU algorithm"},
		{"uva", map[string]string{"GOCCL_TRANSPORT": "uva"}, "GOCCL_TRANSPORT=uva needs GPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Backend: BackendHost, Env: tc.env, Logger: discardLogger()}
			comms, err := InitAll(context.Background(), []int{0, 1}, opts)
			require.Error(t, err)
			assert.Nil(t, comms)
			assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "host backend:"), err.Error())
		})
	}
}
