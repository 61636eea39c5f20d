package topology_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology"
)

func TestParseIBRate(t *testing.T) {
	cases := []struct {
		in   string
		gbps float64
		ok   bool
	}{
		{"400 Gb/sec (4X NDR)", 400, true},
		{"200 Gb/sec (4X HDR)", 200, true},
		{"100 Gb/sec (4X EDR)", 100, true},
		{"25 Gb/sec (1X EDR)", 25, true},
		{"800 Gb/sec (4X XDR)", 800, true},
		{"56 Gb/sec (4X FDR)", 56, true},
		{"40 Gb/sec (4X FDR10)", 40, true},
		{"2.5 Gb/sec (1X)", 2.5, true}, // SDR: the kernel writes no speed name
		{"10 Gb/sec (4X)", 10, true},
		{"53.125 Gb/sec (1X HDR)", 53.125, true},
		{"100 Gb/sec (2X HDR)\n", 100, true},
		{"  50Gb/s ", 50, true},
		{"100 Gbps", 100, true},
		{"25000 Mb/sec", 25, true},
		{"1.6 Tb/sec", 1600, true},
		{"0 Gb/sec (4X)", 0, false},
		{"100", 0, false}, // no unit: Gb/s or Mb/s cannot be told
		{"invalid", 0, false},
		{"", 0, false},
		{"Gb/sec (4X NDR)", 0, false},
		{"400 furlongs (4X NDR)", 0, false},
		{"-400 Gb/sec", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			g, ok := topology.ParseIBRate(tc.in)
			assert.Equal(t, tc.ok, ok)
			assert.InDelta(t, tc.gbps, g, 1e-9)
		})
	}
}

// port is the part of a NetPort the tests compare.
type port struct {
	Name    string
	Active  bool
	GBs     float64
	Netdevs []string
}

func ports(t *testing.T, root string) ([]port, []topology.NetPort, []string) {
	t.Helper()
	ps, warns := topology.NetPorts(root)
	out := make([]port, len(ps))
	for i, p := range ps {
		out[i] = port{p.Name, p.Active, p.GBs, p.Netdevs}
	}
	return out, ps, warns
}

// An RDMA adapter's interfaces are its ports' links, not links of their
// own; the loopback is none; only ACTIVE ports and up interfaces are
// active.
func TestNetPortsMixed(t *testing.T) {
	got, ps, warns := ports(t, "testdata/sys/mixed")
	assert.Empty(t, warns)
	assert.Equal(t, []port{
		{"mlx5_0:1", true, 50, []string{"ib0"}},
		{"mlx5_1:1", true, 25, []string{"ib1"}},
		{"mlx5_2:1", false, 100, []string{"ib2"}},
		{"mlx5_3:1", true, 12.5, []string{"ens3np0"}},
		{"mlx5_4:1", true, 3.125, nil},
		{"mlx5_4:2", false, 12.5, nil},
		{"docker0", true, 0, nil},
		{"eth0", true, 3.125, nil},
		{"eth1", false, 0, nil},
	}, got)
	assert.Equal(t, "Ethernet", ps[3].LinkLayer)
	assert.Equal(t, "InfiniBand", ps[0].LinkLayer)
	assert.Equal(t, "400 Gb/sec (4X NDR)", ps[0].Rate)
	assert.Equal(t, "2: INIT", ps[2].State)
	assert.True(t, ps[0].RDMA)
	assert.False(t, ps[7].RDMA)
	assert.Equal(t, "25000", ps[7].Rate)
	assert.True(t, ps[6].Virtual, "docker0 has no device")
	assert.False(t, ps[7].Virtual)
	assert.False(t, ps[0].Virtual)
}

func TestNetPortsOdd(t *testing.T) {
	got, _, warns := ports(t, "testdata/sys/odd")
	assert.Equal(t, []port{
		{"mlx4_0:1", true, 2.5 / 8, nil},
		{"mlx4_0:2", true, 10.0 / 8, nil},
		{"mlx5_0:1", true, 7, nil},
		{"mlx5_1:1", true, 0, nil},
		{"mlx5_2:1", true, 0, nil},
		{"mlx5_3:1", false, 50, nil}, // ACTIVE_DEFER is not ACTIVE
		{"qedr0:1", true, 6.25, nil},
		{"eth0", true, 1.25, nil},
	}, got)
	require.Len(t, warns, 2)
	assert.Contains(t, warns[0], `mlx5_1:1: rate "invalid" not understood`)
	assert.Contains(t, warns[1], "mlx5_2:1: rate")
}

func TestNetPortsNone(t *testing.T) {
	got, _, warns := ports(t, t.TempDir())
	assert.Empty(t, got)
	assert.Empty(t, warns)
	got, _, _ = ports(t, "testdata/sys/ethonly")
	assert.Equal(t, []port{{"eth0", true, 1.25, nil}, {"eth1", true, 12.5, nil}, {"eth2", true, 0, nil}}, got)
}

// The port the settings leave each stack, and its rate.
func TestChooseNetPort(t *testing.T) {
	cases := []struct {
		name     string
		root     string
		stack    topology.NetStack
		env      map[string]string
		fallback string
		want     string // "" none
		gbs      float64
		by       string
	}{
		{"nccl default: the fastest active port", "mixed", topology.NetNCCL, nil, "eth0", "mlx5_0:1", 50, "the fastest active RDMA port"},
		{"nccl one HCA", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "mlx5_1"}, "eth0", "mlx5_1:1", 25, "NCCL_IB_HCA=mlx5_1"},
		{"nccl HCA prefix", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "mlx5"}, "", "mlx5_0:1", 50, "NCCL_IB_HCA=mlx5"},
		{"nccl HCA exact misses a prefix: sockets", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "=mlx5"}, "eth0", "eth0", 3.125, "NCCL_IB_HCA==mlx5 matches no active RDMA port, the bootstrap's interface"},
		{"nccl HCA excluded", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "^mlx5_0,mlx5_1"}, "", "mlx5_3:1", 12.5, "NCCL_IB_HCA=^mlx5_0,mlx5_1"},
		{"nccl HCA and port", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "=mlx5_4:1,mlx5_3:2"}, "", "mlx5_4:1", 3.125, "NCCL_IB_HCA==mlx5_4:1,mlx5_3:2"},
		{"nccl HCA names only an inactive port", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_HCA": "mlx5_2"}, "", "", 0, "NCCL_IB_HCA=mlx5_2 matches no active RDMA port, the bootstrap's interface"},
		{"nccl IB forced, no active port named", "mixed", topology.NetNCCL, map[string]string{"NCCL_NET": "IB", "NCCL_IB_HCA": "mlx5_2"}, "eth0", "", 0, "NCCL_IB_HCA=mlx5_2"},
		{"nccl IB off: the bootstrap's interface", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_DISABLE": "1"}, "eth0", "eth0", 3.125, "NCCL_IB_DISABLE=1, the bootstrap's interface"},
		{"nccl sockets on IPoIB are the adapter's port", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "ib"}, "eth0", "mlx5_0:1", 50, "NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=ib"},
		{"nccl socket net", "mixed", topology.NetNCCL, map[string]string{"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=eth0"}, "", "eth0", 3.125, "NCCL_NET=Socket, NCCL_SOCKET_IFNAME==eth0"},
		{"nccl socket exclusion", "mixed", topology.NetNCCL, map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "^ib,docker"}, "", "mlx5_3:1", 12.5, "NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=^ib,docker"},
		{"nccl without RDMA ports", "ethonly", topology.NetNCCL, nil, "eth1", "eth1", 12.5, "no active RDMA port, the bootstrap's interface"},
		{"nccl without RDMA ports, sockets named", "ethonly", topology.NetNCCL, map[string]string{"NCCL_SOCKET_IFNAME": "eth"}, "eth0", "eth1", 12.5, "no active RDMA port, NCCL_SOCKET_IFNAME=eth"},
		{"nccl bootstrap interface of unknown rate", "ethonly", topology.NetNCCL, nil, "eth2", "eth2", 0, "no active RDMA port, the bootstrap's interface"},
		{"nccl nothing known", "ethonly", topology.NetNCCL, nil, "", "", 0, "no active RDMA port, the bootstrap's interface"},
		{"ucx default", "mixed", topology.NetUCX, nil, "eth0", "mlx5_0:1", 50, "the fastest active RDMA port"},
		{"ucx one port", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "mlx5_1:1"}, "eth0", "mlx5_1:1", 25, "UCX_NET_DEVICES=mlx5_1:1"},
		{"ucx device without port", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "mlx5_4"}, "", "mlx5_4:1", 3.125, "UCX_NET_DEVICES=mlx5_4"},
		{"ucx inactive port", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "mlx5_4:2"}, "", "", 0, "UCX_NET_DEVICES=mlx5_4:2"},
		{"ucx port and interface", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "eth0,mlx5_3:1"}, "", "mlx5_3:1", 12.5, "UCX_NET_DEVICES=eth0,mlx5_3:1"},
		{"ucx pattern", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "mlx5_[14]:1"}, "", "mlx5_1:1", 25, "UCX_NET_DEVICES=mlx5_[14]:1"},
		{"ucx all", "mixed", topology.NetUCX, map[string]string{"UCX_NET_DEVICES": "all"}, "", "mlx5_0:1", 50, "the fastest active RDMA port"},
		{"ucx tcp only: the bootstrap's interface", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "tcp,self"}, "eth0", "eth0", 3.125, "UCX_TLS=tcp,self, the bootstrap's interface"},
		{"ucx tcp only, ports named", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "mlx5_0:1,eth0"}, "", "eth0", 3.125, "UCX_TLS=tcp,self, UCX_NET_DEVICES=mlx5_0:1,eth0"},
		{"ucx tcp on IPoIB", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "tcp", "UCX_NET_DEVICES": "ib0"}, "", "mlx5_0:1", 50, "UCX_TLS=tcp, UCX_NET_DEVICES=ib0"},
		{"ucx rc", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "rc_x,sm", "UCX_NET_DEVICES": "mlx5_1:1"}, "", "mlx5_1:1", 25, "UCX_NET_DEVICES=mlx5_1:1"},
		{"ucx ib excluded", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "^ib"}, "eth0", "eth0", 3.125, "UCX_TLS=^ib, the bootstrap's interface"},
		{"ucx shm excluded", "mixed", topology.NetUCX, map[string]string{"UCX_TLS": "^sm"}, "eth0", "mlx5_0:1", 50, "the fastest active RDMA port"},
		{"ucx without RDMA ports", "ethonly", topology.NetUCX, nil, "eth0", "eth0", 1.25, "the bootstrap's interface"},
		{"odd rates: the fastest known", "odd", topology.NetNCCL, nil, "", "mlx5_0:1", 7, "the fastest active RDMA port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, _ := topology.NetPorts("testdata/sys/" + tc.root)
			c, ok := topology.ChooseNetPort(ps, tc.stack, func(k string) string { return tc.env[k] }, tc.fallback)
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, c.Port.Name)
			assert.Equal(t, tc.gbs, c.GBs)
			assert.Equal(t, tc.by, c.By)
		})
	}
}
