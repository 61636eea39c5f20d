package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/topology/topotest"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// ourGPUBox is the environment of the project's GPU machines (DESIGN §8).
var ourGPUBox = env("NCCL_NVLS_ENABLE", "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "NVSHMEM_DISABLE_NVLS", "1")

func render(t *testing.T, m *topotest.Machine, jsonOut bool, getenv func(string) string) string {
	t.Helper()
	f, err := topology.Probe(context.Background(), m.Source(t))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, renderInfo(&buf, f, jsonOut, getenv))
	return buf.String()
}

// rows returns the whitespace-separated fields of the lines starting with
// prefix.
func rows(out, prefix string) [][]string {
	var r [][]string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			r = append(r, strings.Fields(line))
		}
	}
	return r
}

func TestInfoText(t *testing.T) {
	tests := []struct {
		name    string
		machine *topotest.Machine
		getenv  func(string) string
		matrix  [][]string // the GPU rows of the topo matrix
		lines   []string   // whole lines that must appear
		absent  []string
	}{
		{
			name: "h200x2", machine: topotest.H200x2(), getenv: ourGPUBox,
			matrix: [][]string{
				{"GPU0", "X", "NV18", "0-55,112-167", "0"},
				{"GPU1", "NV18", "X", "0-55,112-167", "0"},
			},
			lines: []string{
				"Driver: CUDA 12.8, NVIDIA 570.124.06",
				"1 process driving all 2 GPUs: transport uva (one process drives every GPU: peer access over unified addressing)",
				"one process per GPU (2 ranks): transport vmm (every GPU supports VMM with POSIX file descriptors)",
				"NVLS: supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1",
				"algorithms: oneshot, twoshot, ll, ce, nvls; chosen per call by collective, size and rank count",
				"CPU: Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel family 6 model 143), 112 physical / 224 logical cores",
				"NUMA node 1: CPUs 56-111,168-223",
			},
			absent: []string{"unknown: NVML unavailable", "warning"},
		},
		{
			name: "hgx-h100 with GOCCL_ALGO", machine: topotest.HGXH100(), getenv: env("GOCCL_ALGO", "twoshot"),
			matrix: [][]string{
				{"GPU0", "X", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "0-55,112-167", "0"},
				{"GPU1", "NV18", "X", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "0-55,112-167", "0"},
				{"GPU2", "NV18", "NV18", "X", "NV18", "NV18", "NV18", "NV18", "NV18", "0-55,112-167", "0"},
				{"GPU3", "NV18", "NV18", "NV18", "X", "NV18", "NV18", "NV18", "NV18", "0-55,112-167", "0"},
				{"GPU4", "NV18", "NV18", "NV18", "NV18", "X", "NV18", "NV18", "NV18", "56-111,168-223", "1"},
				{"GPU5", "NV18", "NV18", "NV18", "NV18", "NV18", "X", "NV18", "NV18", "56-111,168-223", "1"},
				{"GPU6", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "X", "NV18", "56-111,168-223", "1"},
				{"GPU7", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18", "X", "56-111,168-223", "1"},
			},
			lines: []string{
				"one process per GPU (8 ranks): transport vmm (every GPU supports VMM with POSIX file descriptors)",
				"NVLS: supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1",
				"algorithms: oneshot, twoshot, ll, ce, nvls; forced by GOCCL_ALGO=twoshot",
				"GPU3 fabric: state completed, clique 32766, cluster aa010203-0405-0607-0809-0a0b0c0d0e0f",
			},
		},
		{
			name: "h200x2 without NVML", machine: func() *topotest.Machine { m := topotest.H200x2(); m.NoNVML = true; return m }(), getenv: ourGPUBox,
			matrix: [][]string{
				{"GPU0", "X", "?", "0-55,112-167", "0"},
				{"GPU1", "?", "X", "0-55,112-167", "0"},
			},
			lines: []string{
				"Driver: CUDA 12.8",
				"  ?     unknown: NVML unavailable",
				"warning: NVML unavailable, NVLink and PCIe paths unknown: nvml: libnvidia-ml.so.1 not available: libnvidia-ml.so.1: cannot open shared object file",
				"one process per GPU (2 ranks): transport vmm (every GPU supports VMM with POSIX file descriptors)",
			},
		},
		{
			name: "pcie4", machine: topotest.PCIe4(), getenv: env(),
			matrix: [][]string{
				{"GPU0", "X", "PXB", "SYS", "SYS", "0-55,112-167", "0"},
				{"GPU1", "PXB", "X", "SYS", "SYS", "0-55,112-167", "0"},
				{"GPU2", "SYS", "SYS", "X", "PXB", "56-111,168-223", "1"},
				{"GPU3", "SYS", "SYS", "PXB", "X", "56-111,168-223", "1"},
			},
			lines: []string{
				"1 process driving all 4 GPUs: no transport: no peer access between GPUs: GPU0 (rank 0) cannot access GPU2 (rank 2) over SYS; goccl needs peer access between every pair",
				"one process per GPU (4 ranks): no transport: no peer access between GPUs: GPU0 (rank 0) cannot access GPU2 (rank 2) over SYS; goccl needs peer access between every pair",
			},
			absent: []string{"NVLS:"},
		},
		{
			name: "mixed, bad GOCCL_TRANSPORT and GOCCL_ALGO", machine: topotest.Mixed(), getenv: env("GOCCL_TRANSPORT", "tcp", "GOCCL_ALGO", "ring"),
			matrix: [][]string{
				{"GPU0", "X", "NV12", "NODE", "NODE", "0-63", "0"},
				{"GPU1", "NV12", "X", "NODE", "NODE", "0-63", "0"},
				{"GPU2", "NODE", "NODE", "X", "NV12", "0-63", "0"},
				{"GPU3", "NODE", "NODE", "NV12", "X", "0-63", "0"},
			},
			lines: []string{
				`one process per GPU (4 ranks): no transport: invalid argument: GOCCL_TRANSPORT="tcp" (want uva, ipc, vmm, nvls or shm)`,
				`algorithms: oneshot, twoshot, ll, ce, nvls; invalid argument: GOCCL_ALGO="ring" (want oneshot, twoshot, ll, ce or nvls)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, tt.machine, false, tt.getenv)
			assert.Equal(t, tt.matrix, rows(out, "GPU")[:len(tt.matrix)], "topo matrix in\n%s", out)
			lines := strings.Split(out, "\n")
			for _, want := range tt.lines {
				assert.Contains(t, lines, want, "in\n%s", out)
			}
			for _, no := range tt.absent {
				assert.NotContains(t, out, no)
			}
		})
	}
}

func TestInfoTextTables(t *testing.T) {
	out := render(t, topotest.H200x2(), false, ourGPUBox)
	caps := rows(out, "0 ")
	require.Len(t, caps, 1, out)
	assert.Equal(t, []string{"0", "NVIDIA", "H200", "0000:18:00.0", "9.0", "132", "141.0", "GiB",
		"yes", "yes", "yes", "yes", "yes", "yes", "0"}, caps[0])
	pairs := rows(out, "GPU0-GPU1")
	require.Len(t, pairs, 1, out)
	assert.Equal(t, []string{"GPU0-GPU1", "18", "NVLinks,", "direct", "(NV18)", "450", "GB/s", "yes", "yes"}, pairs[0])
	assert.Contains(t, out, "CPU Affinity")

	out = render(t, topotest.PCIe4(), false, env())
	pairs = rows(out, "GPU1-GPU2")
	require.Len(t, pairs, 1, out)
	assert.Equal(t, []string{"GPU1-GPU2", "PCIe", "SYS", "-", "no", "no"}, pairs[0])
}

func TestInfoNoGPU(t *testing.T) {
	out := render(t, topotest.NoGPU(), false, env())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Contains(t, lines, "no CUDA driver found: libcuda.so.1: cannot open shared object file: No such file or directory")
	assert.Contains(t, lines, "NUMA node 0: CPUs 0-7")
	assert.Contains(t, lines, "host backend (CPU ranks): transport shm (host backend: memfd shared memory between processes)")
	assert.NotContains(t, out, "GPU0")
	assert.NotContains(t, out, "NVLS")
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "CUDA") {
			n++
		}
	}
	assert.Equal(t, 1, n, "one line about the missing driver:\n%s", out)
}

func TestInfoJSON(t *testing.T) {
	out := render(t, topotest.H200x2(), true, ourGPUBox)
	var rep struct {
		Facts   topology.Facts `json:"facts"`
		Choices []struct {
			Mode       string `json:"mode"`
			Ranks      int    `json:"ranks"`
			Transport  string `json:"transport"`
			Reason     string `json:"reason"`
			NVLS       bool   `json:"nvls"`
			NVLSReason string `json:"nvls_reason"`
			Error      string `json:"error"`
		} `json:"choices"`
		Algorithms         []string `json:"algorithms"`
		AlgorithmSelection string   `json:"algorithm_selection"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Facts.GPUs, 2)
	assert.Equal(t, "NV18", rep.Facts.Links[0][1].Label)
	assert.True(t, rep.Facts.GPUs[1].Caps.Multicast)
	require.Len(t, rep.Choices, 2)
	assert.Equal(t, "single_process", rep.Choices[0].Mode)
	assert.Equal(t, "uva", rep.Choices[0].Transport)
	assert.Equal(t, "process_per_gpu", rep.Choices[1].Mode)
	assert.Equal(t, 2, rep.Choices[1].Ranks)
	assert.Equal(t, "vmm", rep.Choices[1].Transport)
	assert.False(t, rep.Choices[1].NVLS)
	assert.Equal(t, "supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1", rep.Choices[1].NVLSReason)
	assert.Empty(t, rep.Choices[1].Error)
	assert.Equal(t, []string{"oneshot", "twoshot", "ll", "ce", "nvls"}, rep.Algorithms)

	f, err := topology.Probe(context.Background(), topotest.H200x2().Source(t))
	require.NoError(t, err)
	assert.True(t, f.Equal(&rep.Facts), "the JSON carries the facts whole")

	out = render(t, topotest.NoGPU(), true, env())
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Empty(t, rep.Facts.GPUs)
	assert.Contains(t, rep.Facts.NoGPUReason, "no CUDA driver found")
	require.Len(t, rep.Choices, 1)
	assert.Equal(t, "shm", rep.Choices[0].Transport)
}

func TestInfoMainFlags(t *testing.T) {
	assert.Equal(t, 2, infoMain([]string{"--bogus"}))
	assert.Equal(t, 2, infoMain([]string{"extra"}))
	assert.Equal(t, 0, infoMain([]string{"-h"}), "help is not an error")
}

// goccl info prints this machine's node id and what it is made of, in
// text and JSON; the id is checked against the hash computed here.
func TestInfoNode(t *testing.T) {
	short := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:8])
	}
	for _, tc := range []struct {
		name     string
		getenv   func(string) string
		hostname func() (string, error)
		boot     func(string) ([]byte, error)
		id, from string
		err      string
	}{
		{name: "GOCCL_HOSTID", getenv: env("GOCCL_HOSTID", "rack3-a"),
			hostname: func() (string, error) { return "ignored", nil },
			boot:     func(string) ([]byte, error) { return []byte("ignored\n"), nil },
			id:       short("hostid:rack3-a"), from: "GOCCL_HOSTID=rack3-a"},
		{name: "hostname and boot id", getenv: env(),
			hostname: func() (string, error) { return "node17", nil },
			boot:     func(string) ([]byte, error) { return []byte("5f1e0c2a-77aa\n"), nil },
			id:       short("host:node17\x00boot:5f1e0c2a-77aa"), from: "hostname node17, boot id 5f1e0c2a-77aa"},
		{name: "no boot id", getenv: env(),
			hostname: func() (string, error) { return "node17", nil },
			boot:     func(string) ([]byte, error) { return nil, fs.ErrNotExist },
			id:       short("host:node17"), from: "hostname node17"},
		{name: "no hostname", getenv: env(),
			hostname: func() (string, error) { return "", errors.New("uts namespace gone") },
			boot:     func(string) ([]byte, error) { return []byte("x"), nil },
			err:      "uts namespace gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := infoNodeSource
			t.Cleanup(func() { infoNodeSource = old })
			infoNodeSource = topology.NodeSource{Getenv: func(string) string { return "poisoned" }, Hostname: tc.hostname, ReadFile: tc.boot}

			text := render(t, topotest.NoGPU(), false, tc.getenv)
			var rep struct {
				Node struct {
					ID    string `json:"id"`
					From  string `json:"from"`
					Error string `json:"error"`
				} `json:"node"`
			}
			require.NoError(t, json.Unmarshal([]byte(render(t, topotest.NoGPU(), true, tc.getenv)), &rep))
			if tc.err != "" {
				assert.Contains(t, text, "\nNode: unknown: ")
				assert.Contains(t, text, tc.err)
				assert.Contains(t, rep.Node.Error, tc.err)
				assert.Empty(t, rep.Node.ID)
				return
			}
			assert.Contains(t, text, "\nNode: "+tc.id+" (from "+tc.from+")\n")
			assert.Equal(t, tc.id, rep.Node.ID)
			assert.Equal(t, tc.from, rep.Node.From)
			assert.Empty(t, rep.Node.Error)
		})
	}
}
