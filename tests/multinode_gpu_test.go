package tests

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internode/nccl"
)

// needGPUAndNCCL skips where the GPU backend across nodes cannot run: no
// CUDA device, or no NCCL to load between the nodes.
func needGPUAndNCCL(t *testing.T, wantNCCL bool) {
	t.Helper()
	drv, err := cuda.Load()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if n, err := drv.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (%v)", err)
	}
	if wantNCCL {
		if _, err := nccl.Load(); err != nil {
			t.Skipf("NCCL not available (pip install nvidia-nccl-cu12, or set GOCCL_NCCL_PATH): %v", err)
		}
	}
}

// gpuNodesEnv: the GPU backend, NCCL's socket transport on the loopback
// (the fake nodes share one machine), every rank on its local rank's device (all on one where there is one).
func gpuNodesEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOCCL_BACKEND=gpu", "GOCCL_DEBUG=INFO",
		"NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1", "NCCL_NVLS_ENABLE=0"), extra...)
}

// TestGPUConformanceAcrossNodes runs tests/conformance on the GPU backend
// with two fake nodes of two ranks each (goccl inside each, NCCL between
// them): every collective, dtype and op and every point-to-point call,
// checked against the program's reference on every rank; with the ranks
// numbered node by node and interleaved.
func TestGPUConformanceAcrossNodes(t *testing.T) {
	needGPUAndNCCL(t, true)
	conf := bin(t, "./tests/conformance")
	cases := []struct {
		name  string
		hosts string // GOCCL_HOSTID from RANK
		args  []string
	}{
		{"2x2/colls", "$((RANK / 2))", []string{"--counts", "0,1,7,4095,1048579", "--stress", "100"}},
		{"2x2/p2p", "$((RANK / 2))", []string{"--colls", "none", "--counts", "7,4095"}},
		{"2x2/interleaved", "$((RANK % 2))", []string{"--counts", "1,4095", "--types", "int32,float32", "--ops", "sum,avg"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			script := fmt.Sprintf(`GOCCL_HOSTID=fake-node-%s exec "$0" "$@"`, tc.hosts)
			args := append([]string{"-c", script, conf, "--backend", "gpu"}, tc.args...)
			res := runJob(t, gpuNodesEnv(), 4, 5*time.Minute, []string{"--tag-output"}, "sh", args...)
			require.Equal(t, 0, res.code, "conformance failed:\n%s", res)
			out := res.stdout + res.stderr
			for r := range 4 {
				assert.Regexp(t, fmt.Sprintf(`(?m)^\[%d\].*goccl: gpu backend across nodes.*nodes=2`, r), out, "rank %d", r)
				assert.Regexp(t, fmt.Sprintf(`(?m)^\[%d\] conformance: rank %d: [1-9]\d* cases, 0 failed$`, r, r), out, "rank %d", r)
			}
		})
	}
}

// TestGPUAcrossNodesWithoutNCCL: a GPU job across nodes whose NCCL cannot
// be loaded fails init on every rank, naming the path tried and the
// setting.
func TestGPUAcrossNodesWithoutNCCL(t *testing.T) {
	needGPUAndNCCL(t, false)
	conf := bin(t, "./tests/conformance")
	script := `GOCCL_HOSTID=fake-node-$((RANK / 2)) exec "$0" "$@"`
	res := runJob(t, gpuNodesEnv("GOCCL_NCCL_PATH=/nonexistent"), 4, 2*time.Minute, []string{"--tag-output"},
		"sh", "-c", script, conf, "--backend", "gpu", "--colls", "allreduce", "--counts", "7")
	require.NotEqual(t, 0, res.code, "a job across nodes ran without NCCL:\n%s", res)
	out := res.stdout + res.stderr
	for r := range 4 {
		line := regexp.MustCompile(fmt.Sprintf(`(?m)^\[%d\].*GOCCL_NCCL_PATH=/nonexistent.*$`, r)).FindString(out)
		assert.NotEmpty(t, line, "rank %d did not name the setting:\n%s", r, res)
		assert.True(t, strings.Contains(line, "span 2 nodes"), "rank %d: %s", r, line)
	}
	assert.NotContains(t, out, "cases, 0 failed", "no rank may have run")
}
