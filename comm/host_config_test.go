package comm

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/syncbuf"
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

// The host backend's single-copy settings (GOCCL_HOST_CMA, _MIN) come
// through Options.Env like every other setting: set there they take
// effect, bad there they fail init naming the variable, and the process
// environment is not read when Options.Env is given.
func TestHostCMASettingsFromOptionsEnv(t *testing.T) {
	t.Setenv("GOCCL_HOST_CMA", "maybe") // would fail init if it were read
	t.Setenv("GOCCL_HOST_CMA_MIN", "lots")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		off     bool   // the DEBUG line says this rank turned it off
		wantErr string // init fails naming the setting
	}{
		{name: "unset", env: map[string]string{}},
		{name: "off", env: map[string]string{"GOCCL_HOST_CMA": "0"}, off: true},
		{name: "on with a threshold", env: map[string]string{"GOCCL_HOST_CMA": "1", "GOCCL_HOST_CMA_MIN": "64K"}},
		{name: "bad switch", env: map[string]string{"GOCCL_HOST_CMA": "perhaps"}, wantErr: `GOCCL_HOST_CMA="perhaps"`},
		{name: "bad threshold", env: map[string]string{"GOCCL_HOST_CMA_MIN": "heaps"}, wantErr: `GOCCL_HOST_CMA_MIN="heaps"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			comms, err := InitAll(context.Background(), []int{0, 1}, Options{Backend: BackendHost, Env: tc.env, Logger: log})
			if tc.wantErr != "" {
				require.ErrorIs(t, err, collectives.ErrInvalidArgument)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			for _, c := range comms {
				require.NoError(t, c.Close())
			}
			if tc.off {
				assert.Contains(t, logs.String(), "turned off on rank 0 (GOCCL_HOST_CMA=0", logs.String())
			} else {
				assert.NotContains(t, logs.String(), "turned off on rank", logs.String())
			}
		})
	}
}
