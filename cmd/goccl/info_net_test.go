package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology/topotest"
)

// The other tests see no network ports, whatever this machine has.
func init() { infoNetRoot = filepath.Join("testdata", "sys", "absent") }

func withNetRoot(t *testing.T, root string) {
	t.Helper()
	old := infoNetRoot
	t.Cleanup(func() { infoNetRoot = old })
	infoNetRoot = root
}

// goccl info lists the RDMA ports (an adapter's interfaces with it, not
// again on their own) and the interfaces, and the port each backend would
// take between nodes under the settings.
func TestInfoNetwork(t *testing.T) {
	withNetRoot(t, filepath.Join("testdata", "sys", "node"))
	out := render(t, topotest.H200x2(), false, env())
	assert.Equal(t, [][]string{{"Port", "Kind", "Interfaces", "State", "Rate", "Bandwidth/dir"}}, rows(out, "Port "))
	assert.Equal(t, [][]string{{"mlx5_0:1", "RDMA", "InfiniBand", "ib0", "4:", "ACTIVE", "400", "Gb/sec", "(4X", "NDR)", "50", "GB/s"}}, rows(out, "mlx5_0:1"))
	assert.Equal(t, [][]string{{"mlx5_1:1", "RDMA", "InfiniBand", "ib1", "2:", "INIT", "(not", "used)", "400", "Gb/sec", "(4X", "NDR)", "50", "GB/s"}}, rows(out, "mlx5_1:1"))
	assert.Equal(t, [][]string{{"mlx5_2:1", "RDMA", "Ethernet", "ens2np0", "4:", "ACTIVE", "100", "Gb/sec", "(2X", "HDR)", "12.5", "GB/s"}}, rows(out, "mlx5_2:1"))
	assert.Equal(t, [][]string{{"eth0", "interface", "-", "up", "25000", "Mb/s", "3.125", "GB/s"}}, rows(out, "eth0"))
	assert.Equal(t, [][]string{{"eth1", "interface", "-", "down", "(not", "used)", "unknown", "-"}}, rows(out, "eth1"))
	for _, owned := range []string{"ib0 ", "ib1 ", "ens2np0 ", "lo ", "veth1a2b "} {
		assert.Empty(t, rows(out, owned), owned)
	}
	lines := strings.Split(out, "\n")
	assert.Contains(t, lines, "(1 virtual interface(s) of unknown rate left out; --json lists them)")
	assert.Contains(t, lines, "gpu backend between nodes (NCCL): mlx5_0:1, ceiling 50 GB/s per direction (the fastest active RDMA port; 2 active port(s) allowed)")
	assert.Contains(t, lines, "host backend between nodes (UCX): mlx5_0:1, ceiling 50 GB/s per direction (the fastest active RDMA port; 2 active port(s) allowed)")

	out = render(t, topotest.H200x2(), false, env("NCCL_IB_HCA", "mlx5_2", "UCX_TLS", "tcp", "UCX_NET_DEVICES", "eth0"))
	lines = strings.Split(out, "\n")
	assert.Contains(t, lines, "gpu backend between nodes (NCCL): mlx5_2:1, ceiling 12.5 GB/s per direction (NCCL_IB_HCA=mlx5_2; 1 active port(s) allowed)")
	assert.Contains(t, lines, "host backend between nodes (UCX): eth0, ceiling 3.125 GB/s per direction (UCX_TLS=tcp, UCX_NET_DEVICES=eth0; 1 active port(s) allowed)")

	out = render(t, topotest.H200x2(), false, env("NCCL_IB_HCA", "mlx5_1", "UCX_NET_DEVICES", "eth1"))
	lines = strings.Split(out, "\n")
	assert.Contains(t, lines, "gpu backend between nodes (NCCL): the bootstrap's interface, known at init (NCCL_IB_HCA=mlx5_1 matches no active RDMA port); its rate, where sysfs gives one, is the ceiling across nodes")
	assert.Contains(t, lines, "host backend between nodes (UCX): no active port fits (UCX_NET_DEVICES=eth1): no ceiling across nodes")
}

func TestInfoNetworkNone(t *testing.T) {
	withNetRoot(t, t.TempDir())
	out := render(t, topotest.NoGPU(), false, env())
	lines := strings.Split(out, "\n")
	assert.Contains(t, lines, "Network: no RDMA port or interface found (/sys/class/infiniband, /sys/class/net)")
	assert.Contains(t, lines, "gpu backend between nodes (NCCL): the bootstrap's interface, known at init (no active RDMA port); its rate, where sysfs gives one, is the ceiling across nodes")
	assert.Contains(t, lines, "host backend between nodes (UCX): the bootstrap's interface, known at init; its rate, where sysfs gives one, is the ceiling across nodes")
}

func TestInfoNetworkJSON(t *testing.T) {
	withNetRoot(t, filepath.Join("testdata", "sys", "node"))
	out := render(t, topotest.H200x2(), true, env("NCCL_IB_DISABLE", "1", "NCCL_SOCKET_IFNAME", "ens"))
	var rep struct {
		Network struct {
			Ports []struct {
				Name   string  `json:"name"`
				RDMA   bool    `json:"rdma"`
				Active bool    `json:"active"`
				GBs    float64 `json:"gbs"`
			} `json:"ports"`
			Choices []struct {
				Backend string `json:"backend"`
				Stack   string `json:"stack"`
				Port    struct {
					Name string `json:"name"`
				} `json:"port"`
				By    string  `json:"by"`
				GBs   float64 `json:"gbs"`
				Found bool    `json:"found"`
			} `json:"choices"`
		} `json:"network"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	var names []string
	for _, p := range rep.Network.Ports {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "eth0", "eth1", "veth1a2b"}, names)
	assert.False(t, rep.Network.Ports[1].Active)
	assert.Equal(t, 50.0, rep.Network.Ports[0].GBs)
	require.Len(t, rep.Network.Choices, 2)
	gpu := rep.Network.Choices[0]
	assert.Equal(t, "gpu", gpu.Backend)
	assert.Equal(t, "NCCL", gpu.Stack)
	assert.True(t, gpu.Found)
	assert.Equal(t, "mlx5_2:1", gpu.Port.Name, "sockets on RoCE's interface are its port")
	assert.Equal(t, 12.5, gpu.GBs)
	assert.Equal(t, "NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=ens", gpu.By)
	assert.Equal(t, "UCX", rep.Network.Choices[1].Stack)
	assert.Equal(t, "mlx5_0:1", rep.Network.Choices[1].Port.Name)
}
