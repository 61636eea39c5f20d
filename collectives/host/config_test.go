package host

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestConfigResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "defaults", want: Config{Timeout: 5 * time.Minute, StagingBytes: 2 << 20, OneShotMax: 256 << 10}},
		{name: "env algo and seconds", env: map[string]string{"GOCCL_ALGO": "twoshot", "GOCCL_TIMEOUT": "7"},
			want: Config{Algo: "twoshot", Timeout: 7 * time.Second, StagingBytes: 2 << 20, OneShotMax: 256 << 10}},
		{name: "env duration", env: map[string]string{"GOCCL_TIMEOUT": "1m30s"},
			want: Config{Timeout: 90 * time.Second, StagingBytes: 2 << 20, OneShotMax: 256 << 10}},
		{name: "config beats env", cfg: Config{Algo: "oneshot", Timeout: time.Second}, env: map[string]string{"GOCCL_ALGO": "twoshot", "GOCCL_TIMEOUT": "junk"},
			want: Config{Algo: "oneshot", Timeout: time.Second, StagingBytes: 2 << 20, OneShotMax: 256 << 10}},
		{name: "unknown algo", cfg: Config{Algo: "ring"}, wantErr: `GOCCL_ALGO="ring"`},
		{name: "copy engine", cfg: Config{Algo: "ce"}, wantErr: "GOCCL_ALGO=ce is a GPU algorithm"},
		{name: "copy engine from env", env: map[string]string{"GOCCL_ALGO": "ce"}, wantErr: "GOCCL_ALGO=ce is a GPU algorithm"},
		{name: "ll", env: map[string]string{"GOCCL_ALGO": "ll"}, wantErr: "GOCCL_ALGO=ll is a GPU algorithm"},
		{name: "nvls", cfg: Config{Algo: "nvls"}, wantErr: "GOCCL_ALGO=nvls is a GPU algorithm"},
		{name: "shm transport", cfg: Config{Transport: "shm"},
			want: Config{Transport: "shm", Timeout: 5 * time.Minute, StagingBytes: 2 << 20, OneShotMax: 256 << 10}},
		{name: "uva transport", cfg: Config{Transport: "uva"}, wantErr: "GOCCL_TRANSPORT=uva needs GPUs"},
		{name: "vmm transport", cfg: Config{Transport: "VMM"}, wantErr: "GOCCL_TRANSPORT=vmm needs GPUs"},
		{name: "bad env timeout", env: map[string]string{"GOCCL_TIMEOUT": "soon"}, wantErr: `GOCCL_TIMEOUT="soon"`},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second}, wantErr: "negative"},
		{name: "tiny staging", cfg: Config{StagingBytes: 100}, wantErr: "staging 100 bytes"},
		{name: "odd staging", cfg: Config{StagingBytes: 5000}, wantErr: "staging 5000 bytes"},
		{name: "negative one-shot", cfg: Config{OneShotMax: -1}, wantErr: "one-shot limit -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOCCL_ALGO", "")
			t.Setenv("GOCCL_TIMEOUT", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := tc.cfg.resolve(4)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, collectives.ErrInvalidArgument)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.NotNil(t, got.Logger)
			got.Logger = nil
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestNewRejectsDisagreeingRanks(t *testing.T) {
	g := transporttest.NewGroup(3)
	errs := make([]error, 3)
	_ = g.Run(func(rank int, b transport.Bootstrap) error {
		cfg := Config{}
		if rank == 1 {
			cfg.Algo = "oneshot"
		}
		be, err := New(context.Background(), b, cfg)
		if be != nil {
			be.Close()
		}
		errs[rank] = err
		return nil
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), "algorithm oneshot")
		if r != 1 {
			assert.Contains(t, err.Error(), "rank 1 has")
		}
	}
}

func TestNewFailsTogetherOnOneRanksBadConfig(t *testing.T) {
	g := transporttest.NewGroup(3)
	errs := make([]error, 3)
	_ = g.Run(func(rank int, b transport.Bootstrap) error {
		cfg := Config{}
		if rank == 2 {
			cfg.StagingBytes = 1000
		}
		be, err := New(context.Background(), b, cfg)
		if be != nil {
			be.Close()
		}
		errs[rank] = err
		return nil
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), "staging 1000 bytes")
		if r != 2 {
			assert.Contains(t, err.Error(), "rank 2:")
		}
	}
}

func TestNewFailsOnBadEnvWithoutMapping(t *testing.T) {
	t.Setenv("GOCCL_ALGO", "bogus")
	before := countMaps(t)
	be, err := New(context.Background(), transporttest.NewGroup(1).Rank(0), Config{})
	require.Error(t, err)
	assert.Nil(t, be)
	assert.Contains(t, err.Error(), "bogus")
	assert.Equal(t, before, countMaps(t))
}

func countMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}
