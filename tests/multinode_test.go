package tests

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internode/ucx"
	"github.com/goccl/goccl/tests/twonodes"
)

// fakeNodes wraps prog so that `goccl run` ranks land on fake nodes of
// per ranks each: GOCCL_HOSTID (and the local rank) from the rank.
func fakeNodes(per int, prog string, args ...string) (string, []string) {
	script := fmt.Sprintf(`GOCCL_HOSTID=fake-node-$((RANK / %d)) LOCAL_RANK=$((RANK %% %d)) LOCAL_WORLD_SIZE=%d exec "$0" "$@"`, per, per, per)
	return "sh", append([]string{"-c", script, prog}, args...)
}

// TestConformanceAcrossNodes runs tests/conformance on the host backend
// with two and three fake nodes of two ranks each, UCX over TCP on the
// loopback between them: every collective × dtype × op and every
// point-to-point call, checked bit-exactly on integers against the
// program's reference, on every rank; and the collectives on buffers
// from Alloc.
func TestConformanceAcrossNodes(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	conf := bin(t, "./tests/conformance")
	small := []string{"--counts", fmt.Sprintf("0,1,%d", primeCount)}
	p2p := []string{"--colls", "none", "--counts", "7,4095"}
	big := []string{"--counts", strconv.Itoa(bigCount), "--types", "int32,float32,bfloat16", "--ops", "sum,avg,mulsum"}
	// Buffers from the communicator's Alloc: node-local shared memory,
	// the legs inside the node on the direct path.
	alloc := []string{"--register", "--counts", fmt.Sprintf("0,1,7,4095,%d", 1<<20+3), "--types", "int32,float32", "--ops", "sum,max,avg"}
	cases := []struct {
		name  string
		nodes int
		args  []string
	}{
		{"2x2/small", 2, small},
		{"2x2/p2p", 2, p2p},
		{"2x2/big", 2, big},
		{"2x2/alloc", 2, alloc},
		{"3x2/small", 3, small},
		{"3x2/p2p", 3, p2p},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			np := 2 * tc.nodes
			prog, args := fakeNodes(2, conf, append([]string{"--backend", "host"}, tc.args...)...)
			// TCP and self only: what two machines without RDMA share.
			env := hostEnv("UCX_TLS=tcp,self", "GOCCL_DEBUG=INFO")
			res := runJob(t, env, np, 5*time.Minute, []string{"--tag-output"}, prog, args...)
			t.Logf("%s: %v", tc.name, res.took.Round(time.Millisecond))
			require.Equal(t, 0, res.code, "conformance failed:\n%s", res)
			out := res.stdout + res.stderr
			assert.NotContains(t, res.stdout, "skipped", "the host backend runs every call")
			for r := 0; r < np; r++ {
				// The rank really ran across nodes, and checked cases.
				assert.Regexp(t, fmt.Sprintf(`(?m)^\[%d\].*goccl: host backend across nodes.*nodes=%d`, r, tc.nodes), out, "rank %d", r)
				m := regexp.MustCompile(fmt.Sprintf(`(?m)^\[%d\] conformance: rank %d: (\d+) cases, 0 failed$`, r, r)).FindStringSubmatch(out)
				if assert.NotNil(t, m, "rank %d did not report:\n%s", r, res) {
					n, _ := strconv.Atoi(m[1])
					assert.Positive(t, n, "rank %d checked no case", r)
				}
			}
			assert.False(t, strings.Contains(out, "ranks on more than one node"), "init refused the nodes")
		})
	}
}

// TestAcrossNodesWithoutUCX: a job across nodes whose libucp cannot be
// loaded fails init on every rank, saying which library, which path was
// tried and which setting to use; the same job on one node never loads
// it and runs.
func TestAcrossNodesWithoutUCX(t *testing.T) {
	conf := bin(t, "./tests/conformance")
	const missing = "/nonexistent/ucx/libucp.so.0"
	args := []string{"--backend", "host", "--colls", "allreduce", "--types", "int32", "--ops", "sum", "--counts", "7"}
	prog, pargs := fakeNodes(2, conf, args...)
	res := runJob(t, hostEnv("GOCCL_UCX_PATH="+missing), 4, 2*time.Minute, []string{"--tag-output"}, prog, pargs...)
	require.NotEqual(t, 0, res.code, "a job across nodes ran without libucp:\n%s", res)
	out := res.stdout + res.stderr
	assert.Contains(t, out, missing, "the path tried")
	assert.Contains(t, out, "GOCCL_UCX_PATH", "the setting")
	assert.Contains(t, out, "span 2 nodes", "why UCX was needed")
	assert.NotContains(t, out, "cases, 0 failed", "no rank may have run")

	prog, pargs = fakeNodes(4, conf, args...) // one node of four
	res = runJob(t, hostEnv("GOCCL_UCX_PATH="+missing), 4, 2*time.Minute, []string{"--tag-output"}, prog, pargs...)
	require.Equal(t, 0, res.code, "one node must not need UCX:\n%s", res)
}

// TestConformanceAcrossNamespaces runs tests/conformance on two nodes of
// two ranks in two network namespaces joined by a veth pair: no loopback
// between the nodes, UCX over TCP on the link, the bootstrap on rank 0's
// address on it. Every rank checks every case of the small matrix and of
// the point-to-point calls.
func TestConformanceAcrossNamespaces(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	nodes := twonodes.New(t)
	conf := bin(t, "./tests/conformance")
	for i, args := range [][]string{
		{"--counts", fmt.Sprintf("0,1,%d", primeCount)},
		{"--colls", "none", "--counts", "7,4095"},
	} {
		const np = 4
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		outs := make([]*bytes.Buffer, np)
		cmds := make([]*exec.Cmd, np)
		addr := netip.AddrPortFrom(nodes.Addr[0], uint16(29600+i))
		for r := range np {
			cmd := nodes.Command(r/2, conf, append([]string{"--backend", "host"}, args...)...)
			cmd.Env = append(os.Environ(), "GOCCL_BACKEND=host", "GOCCL_COMM_ID="+addr.String(),
				"RANK="+strconv.Itoa(r), "WORLD_SIZE=4", "LOCAL_RANK="+strconv.Itoa(r%2), "LOCAL_WORLD_SIZE=2",
				// Each namespace is its own machine to goccl too.
				fmt.Sprintf("GOCCL_HOSTID=ns-node-%d", r/2),
				"UCX_TLS=tcp,self", "UCX_NET_DEVICES="+twonodes.Dev, "GOCCL_DEBUG=INFO")
			outs[r] = &bytes.Buffer{}
			cmd.Stdout, cmd.Stderr = outs[r], outs[r]
			cmd.WaitDelay = 5 * time.Second
			require.NoError(t, cmd.Start())
			cmds[r] = cmd
			go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
		}
		for r, cmd := range cmds {
			err := cmd.Wait()
			out := outs[r].String()
			require.NoError(t, err, "rank %d:\n%s", r, out)
			assert.Contains(t, out, "goccl: host backend across nodes", "rank %d", r)
			assert.Regexp(t, fmt.Sprintf(`(?m)^conformance: rank %d: [1-9]\d* cases, 0 failed$`, r), out, "rank %d", r)
		}
		require.NoError(t, ctx.Err(), "the job hung")
	}
}

// TestConformanceUnderMpirun starts the conformance program with Open
// MPI's mpirun (oversubscribed, on this machine) on two fake nodes of two
// ranks: goccl reads mpirun's environment, meets through its rendezvous
// file, and spans the nodes over UCX.
func TestConformanceUnderMpirun(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun (install openmpi-bin)")
	}
	conf := bin(t, "./tests/conformance")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script := `GOCCL_HOSTID=mpi-node-$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" "$@"`
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4",
		"-x", "GOCCL_BACKEND=host", "-x", "UCX_TLS=tcp,self", "-x", "GOCCL_DEBUG=INFO",
		"sh", "-c", script, conf, "--backend", "host", "--counts", fmt.Sprintf("0,1,%d", primeCount))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mpirun:\n%s", out)
	for r := 0; r < 4; r++ {
		assert.Regexp(t, fmt.Sprintf(`(?m)^conformance: rank %d: [1-9]\d* cases, 0 failed$`, r), string(out), "rank %d", r)
		assert.Regexp(t, fmt.Sprintf(`goccl: host backend across nodes.* rank=%d .*nodes=2`, r), string(out), "rank %d", r)
	}
}
