package topology_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/nvml"
	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/topology/topotest"
)

// ProbeBuses tells the links between GPUs by bus id from NVML alone, in
// the order asked, as Probe tells them between the GPUs CUDA shows.
func TestProbeBuses(t *testing.T) {
	cases := []struct {
		name    string
		machine *topotest.Machine
		buses   []string
		cc      [2]int
		kinds   []topology.LinkKind // of pairs (0,1), (0,2), (1,2), ...
		gbs     []float64
	}{
		{"NVSwitch, two of eight", topotest.HGXH100(), []string{"0000:db:00.0", "0000:2a:00.0"}, [2]int{9, 0},
			[]topology.LinkKind{topology.LinkNVSwitch}, []float64{450}},
		{"direct NV18, NVML's bus form", topotest.H200x2(), []string{"00000000:2A:00.0", "0000:18:00.0"}, [2]int{9, 0},
			[]topology.LinkKind{topology.LinkNVLink}, []float64{450}},
		{"bridged pairs", topotest.Mixed(), []string{"0000:61:00.0", "0000:01:00.0", "0000:41:00.0"}, [2]int{8, 0},
			[]topology.LinkKind{topology.LinkPCIe, topology.LinkNVLink, topology.LinkPCIe}, []float64{0, 300, 0}},
		{"PCIe only", topotest.PCIe4(), []string{"0000:17:00.0", "0000:ca:00.0"}, [2]int{8, 9},
			[]topology.LinkKind{topology.LinkPCIe}, []float64{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := topology.ProbeBuses(tc.machine.Source(t), tc.buses, tc.cc[0], tc.cc[1])
			require.NoError(t, err)
			require.Len(t, f.GPUs, len(tc.buses))
			for i, b := range tc.buses {
				assert.Equal(t, topology.NormalizeBusID(b), f.GPUs[i].BusID)
				assert.Equal(t, topology.LinkSelf, f.Links[i][i].Kind)
			}
			k := 0
			for i := range tc.buses {
				for j := i + 1; j < len(tc.buses); j++ {
					assert.Equal(t, tc.kinds[k], f.Links[i][j].Kind, "GPU%d-GPU%d", i, j)
					assert.Equal(t, tc.gbs[k], f.Links[i][j].BandwidthGBs, "GPU%d-GPU%d", i, j)
					assert.Equal(t, f.Links[i][j], f.Links[j][i], "GPU%d-GPU%d", i, j)
					k++
				}
			}
		})
	}
	t.Run("a bus without a GPU", func(t *testing.T) {
		f, err := topology.ProbeBuses(topotest.H200x2().Source(t), []string{"0000:18:00.0", "0000:99:00.0"}, 9, 0)
		require.NoError(t, err)
		assert.Equal(t, topology.LinkUnknown, f.Links[0][1].Kind)
		assert.Zero(t, f.Links[0][1].BandwidthGBs)
		assert.NotEmpty(t, f.Warnings)
	})
	t.Run("no NVML", func(t *testing.T) {
		m := topotest.H200x2()
		m.NoNVML = true
		_, err := topology.ProbeBuses(m.Source(t), []string{"0000:18:00.0", "0000:2a:00.0"}, 9, 0)
		require.ErrorIs(t, err, nvml.ErrNoLibrary)
	})
}
