package job

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// --backend auto (the default) defers to GOCCL_BACKEND, as the library
// does: a user who sets GOCCL_BACKEND=gpu must not be benchmarked on the
// host backend without a word.
func TestOpenHonoursGOCCLBackend(t *testing.T) {
	if launched() {
		t.Skip("runs one in-process rank; a launcher's variables are set")
	}
	ctx := context.Background()
	tests := []struct {
		env, flag string
		want      string // backend of the job, or "" when Open must fail
		errHas    string
	}{
		{"host", "auto", "host", ""},
		{"host", "", "host", ""},
		{"HOST", "auto", "host", ""},
		{"gpu", "auto", "gpu", "gpu"},
		{"bogus", "auto", "", `backend "bogus" from --backend or GOCCL_BACKEND`},
		{"gpu", "host", "host", ""}, // an explicit flag wins
	}
	for _, tt := range tests {
		t.Run(tt.env+"/"+tt.flag, func(t *testing.T) {
			t.Setenv("GOCCL_BACKEND", tt.env)
			j, err := Open(ctx, Options{Backend: tt.flag, InProcess: 1})
			if err != nil {
				// gpu without a CUDA driver fails: it must not fall back.
				require.NotEmpty(t, tt.errHas, "unexpected error: %v", err)
				assert.Contains(t, err.Error(), tt.errHas)
				if tt.want == "" {
					assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
				}
				return
			}
			defer func() { require.NoError(t, j.Close()) }()
			require.NotEmpty(t, tt.want, "Open must fail")
			assert.Equal(t, tt.want, j.Backend)
		})
	}
}

// In-process ranks inside a launcher's job are refused before anything
// starts, naming the flag that asked for them.
func TestOpenInProcessUnderALauncherNamesTheFlag(t *testing.T) {
	t.Setenv("GOCCL_COMM_ID", "127.0.0.1:1")
	tests := []struct {
		flag, want string
	}{
		{"-g", "-g 2 (2 in-process ranks) inside a launcher's job, whose processes are one rank each: leave -g out under goccl run"},
		{"", "2 in-process ranks inside a launcher's job"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			j, err := Open(context.Background(), Options{Backend: "host", InProcess: 2, InProcessFlag: tt.flag})
			require.Error(t, err)
			assert.Nil(t, j)
			assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
