package comm

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func TestParseEnv(t *testing.T) {
	ap := netip.MustParseAddrPort
	cases := []struct {
		name string
		env  map[string]string
		ppid int
		want EnvInfo
	}{
		{"goccl run", map[string]string{"GOCCL_COMM_ID": "127.0.0.1:29500", "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1", "GOCCL_JOB_TOKEN": "00112233445566778899aabbccddeeff"}, 0,
			EnvInfo{Rank: 2, Size: 4, LocalRank: 2, LocalSize: 4, Source: SourceTorchrun, Addr: ap("127.0.0.1:29500"), AddrVar: "GOCCL_COMM_ID", Token: "00112233445566778899aabbccddeeff"}},
		{"goccl comm id with ompi ranks", map[string]string{"GOCCL_COMM_ID": "[::1]:7000", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 0,
			EnvInfo{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Source: SourceOpenMPI, Addr: ap("[::1]:7000"), AddrVar: "GOCCL_COMM_ID"}},
		{"torchrun", map[string]string{"MASTER_ADDR": "localhost", "MASTER_PORT": "29500", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}, 0,
			EnvInfo{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Source: SourceTorchrun, Addr: ap("127.0.0.1:29500"), AddrVar: "MASTER_ADDR"}},
		{"torchrun without local vars", map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234", "RANK": "0", "WORLD_SIZE": "1"}, 0,
			EnvInfo{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Source: SourceTorchrun, Addr: ap("127.0.0.1:1234"), AddrVar: "MASTER_ADDR"}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_NAMESPACE": "prterun-host-1234@1", "OMPI_MCA_ess_base_jobid": "99"}, 77,
			EnvInfo{Rank: 3, Size: 4, LocalRank: 3, LocalSize: 4, Source: SourceOpenMPI, JobKey: "PMIX_NAMESPACE=prterun-host-1234@1"}},
		{"open mpi, only ppid", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, 4242,
			EnvInfo{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, Source: SourceOpenMPI, JobKey: "ppid=4242"}},
		{"pmi", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "PMI_KVSNAME": "kvs_1"}, 5,
			EnvInfo{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Source: SourcePMI, JobKey: "PMI_KVSNAME=kvs_1"}},
		{"slurm", map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}, 5,
			EnvInfo{Rank: 6, Size: 8, LocalRank: 2, LocalSize: 8, Source: SourceSlurm, JobKey: "SLURM_JOB_ID=77.0"}},
		{"torchrun's agent holds MASTER_PORT: file rendezvous on one node", map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}, 0,
			EnvInfo{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Source: SourceTorchrun, JobKey: "torchelastic=none.0.29500"}},
		{"torchrun across nodes keeps MASTER_ADDR", map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "r1"}, 0,
			EnvInfo{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Source: SourceTorchrun, Addr: ap("127.0.0.1:29500"), AddrVar: "MASTER_ADDR"}},
		{"torchrun wins over slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, 0,
			EnvInfo{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Source: SourceTorchrun, Addr: ap("127.0.0.1:9"), AddrVar: "MASTER_ADDR"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEnv(c.env, c.ppid)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseEnvErrors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // the variable the error must name
	}{
		{"nothing", map[string]string{}, "no launcher environment"},
		{"rank not int", map[string]string{"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, `RANK="x": not an integer`},
		{"rank too big", map[string]string{"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, `RANK="4": out of range [0,3]`},
		{"world size missing", map[string]string{"RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "WORLD_SIZE is not set"},
		{"world size zero", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, `WORLD_SIZE="0"`},
		{"local rank beyond local size", map[string]string{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, `LOCAL_RANK="2"`},
		{"bad comm id", map[string]string{"GOCCL_COMM_ID": "nohostport", "RANK": "0", "WORLD_SIZE": "1"}, "GOCCL_COMM_ID"},
		{"comm id port", map[string]string{"GOCCL_COMM_ID": "127.0.0.1:99999", "RANK": "0", "WORLD_SIZE": "1"}, "GOCCL_COMM_ID"},
		{"master port missing", map[string]string{"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1"}, "MASTER_PORT is not"},
		{"master port bad", map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http", "RANK": "0", "WORLD_SIZE": "1"}, `MASTER_PORT="http"`},
		{"master addr missing", map[string]string{"MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1"}, "MASTER_ADDR is not"},
		{"ompi size bad", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "-1"}, "OMPI_COMM_WORLD_SIZE"},
		{"slurm no key", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "no bootstrap address"},
		{"token not hex", map[string]string{"GOCCL_JOB_TOKEN": "not-hex-at-all-really", "RANK": "0", "WORLD_SIZE": "1"}, "GOCCL_JOB_TOKEN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEnv(c.env, 0)
			require.Error(t, err)
			assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestOptionsResolve(t *testing.T) {
	cases := []struct {
		name  string
		opts  Options
		env   map[string]string
		check func(t *testing.T, s settings)
	}{
		{"defaults", Options{}, map[string]string{}, func(t *testing.T, s settings) {
			assert.Equal(t, BackendAuto, s.backend)
			assert.Equal(t, DefaultTimeout, s.timeout)
			assert.Equal(t, DefaultHeartbeatInterval, s.hbInterval)
			assert.Nil(t, s.device)
			assert.False(t, s.check)
			assert.False(t, s.log.Enabled(context.TODO(), -1), "default level is WARN")
		}},
		{"env", Options{}, map[string]string{"GOCCL_BACKEND": "HOST", "GOCCL_TIMEOUT": "2m", "GOCCL_TRANSPORT": "vmm", "GOCCL_ALGO": "oneshot", "GOCCL_CHECK": "1", "GOCCL_DEBUG": "TRACE"}, func(t *testing.T, s settings) {
			assert.Equal(t, BackendHost, s.backend)
			assert.Equal(t, 2*time.Minute, s.timeout)
			assert.Equal(t, "vmm", s.transport)
			assert.Equal(t, "oneshot", s.algo)
			assert.True(t, s.check)
			assert.True(t, s.log.Enabled(context.TODO(), LevelTrace))
		}},
		{"seconds", Options{}, map[string]string{"GOCCL_TIMEOUT": "7"}, func(t *testing.T, s settings) {
			assert.Equal(t, 7*time.Second, s.timeout)
		}},
		{"options win", Options{Backend: "gpu", Timeout: time.Second, Algo: "twoshot", Device: Device(3)}, map[string]string{"GOCCL_BACKEND": "host", "GOCCL_TIMEOUT": "9s", "GOCCL_ALGO": "oneshot"}, func(t *testing.T, s settings) {
			assert.Equal(t, BackendGPU, s.backend)
			assert.Equal(t, time.Second, s.timeout)
			assert.Equal(t, "twoshot", s.algo)
			assert.Equal(t, 3, *s.device)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.opts.resolve(c.env)
			require.NoError(t, err)
			c.check(t, s)
		})
	}
}

func TestOptionsResolveErrors(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		env  map[string]string
		want string
	}{
		{"backend env", Options{}, map[string]string{"GOCCL_BACKEND": "tpu"}, `GOCCL_BACKEND="tpu"`},
		{"backend option", Options{Backend: "tpu"}, nil, `Options.Backend="tpu"`},
		{"timeout", Options{}, map[string]string{"GOCCL_TIMEOUT": "soon"}, `GOCCL_TIMEOUT="soon"`},
		{"timeout negative", Options{}, map[string]string{"GOCCL_TIMEOUT": "-1s"}, `GOCCL_TIMEOUT="-1s"`},
		{"check", Options{}, map[string]string{"GOCCL_CHECK": "yes"}, `GOCCL_CHECK="yes"`},
		{"debug", Options{}, map[string]string{"GOCCL_DEBUG": "LOUD"}, `GOCCL_DEBUG="LOUD"`},
		{"device", Options{Device: Device(-2)}, nil, "Options.Device=-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.opts.resolve(c.env)
			require.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// goccl's text logs name LevelTrace TRACE (slog alone writes DEBUG-4) and
// leave the other levels as slog writes them.
func TestNameTraceLevel(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  string
	}{
		{LevelTrace, "level=TRACE "},
		{slog.LevelDebug, "level=DEBUG "},
		{slog.LevelInfo, "level=INFO "},
		{slog.LevelWarn, "level=WARN "},
		{LevelTrace + 1, "level=DEBUG-3 "},
	} {
		var b bytes.Buffer
		log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: LevelTrace, ReplaceAttr: NameTraceLevel}))
		log.Log(context.Background(), tc.level, "m", "level", "an attribute named level")
		assert.Contains(t, b.String(), tc.want, "%v", tc.level)
		assert.Contains(t, b.String(), `level="an attribute named level"`, "only the record's level is renamed")
	}
}
