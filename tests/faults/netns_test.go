package faults

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internode/ucx"
	"github.com/goccl/goccl/tests/twonodes"
)

// spawnIn is spawn with the child inside namespace ns.
func spawnIn(t *testing.T, nodes *twonodes.Nodes, node int, env ...string) *proc {
	t.Helper()
	return startProc(t, nodes.Command(node, os.Args[0], "-test.run=^$"), env)
}

// Two nodes of two ranks in two network namespaces (the host backend,
// UCX over TCP on the veth pair between them), looping on a call; then
// the link between the nodes goes down. Every rank fails within the
// bound, naming a rank on the other node.
func TestLinkDownBetweenNodes(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	for _, coll := range []string{"allreduce", "sendrecv"} {
		t.Run(coll, func(t *testing.T) {
			nodes := twonodes.New(t)
			id, err := comm.NewUniqueIDAt(netip.AddrPortFrom(nodes.Addr[0], 29500+uint16(len(coll))))
			require.NoError(t, err)
			const nranks = 4
			var ranks []*proc
			for r := range nranks {
				ranks = append(ranks, spawnIn(t, nodes, r/2, childVar+"=rank", "FAULTS_ID="+id.String(),
					"FAULTS_NRANKS=4", "FAULTS_RANK="+strconv.Itoa(r), "FAULTS_COLL="+coll, "FAULTS_COUNT=100000",
					"FAULTS_HB=500ms", "GOCCL_TIMEOUT=30s", "GOCCL_BACKEND=host",
					"UCX_TLS=tcp,self", "UCX_NET_DEVICES="+twonodes.Dev,
					// Each namespace is its own machine to goccl too.
					fmt.Sprintf("GOCCL_HOSTID=ns-node-%d", r/2)))
			}
			for _, p := range ranks {
				p.expect(t, "ITER0", 30*time.Second)
			}
			time.Sleep(50 * time.Millisecond)
			t0 := time.Now()
			nodes.LinkDown(t, 1)
			j := &job{id: id, ranks: ranks}
			var fs []failure
			for r, p := range j.ranks {
				l := p.expect(t, "FAILED", 20*time.Second)
				lat := time.Unix(0, fieldInt(t, l, "t")).Sub(t0)
				fs = append(fs, failure{rank: r, line: l, latency: lat})
				t.Logf("rank %d after %v: %s", r, lat.Round(time.Millisecond), l)
				peer, err := strconv.Atoi(field(l, "peer"))
				if assert.NoError(t, err, "rank %d names no rank: %s", r, l) {
					assert.NotEqual(t, r/2, peer/2, "rank %d must name a rank on the other node: %s", r, l)
				}
				assert.Equal(t, 1, p.exitCode(t, 15*time.Second))
			}
			t.Logf("worst time to error: %v", worst(fs))
		})
	}
}
