package collectives_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/topology/topotest"
	"github.com/goccl/goccl/transport/nvls"
)

// gate is nvls.Gate over a fixed environment.
func gate(env map[string]string) func() (bool, string) {
	return func() (bool, string) { return nvls.Gate(func(k string) string { return env[k] }) }
}

var (
	closed    = gate(map[string]string{})
	open      = gate(map[string]string{"GOCCL_NVLS_ENABLE": "1"})
	optedOut  = gate(map[string]string{"GOCCL_NVLS_ENABLE": "1", "NCCL_NVLS_ENABLE": "0"})
	ourGPUBox = gate(map[string]string{"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
)

func probe(t *testing.T, m *topotest.Machine) *topology.Facts {
	t.Helper()
	f, err := topology.Probe(context.Background(), m.Source(t))
	require.NoError(t, err)
	return f
}

func perGPU(devs ...int) collectives.Placement {
	return collectives.Placement{NRanks: len(devs), Devices: devs}
}

func oneProc(devs ...int) collectives.Placement {
	return collectives.Placement{NRanks: len(devs), SingleProcess: true, Devices: devs}
}

func TestChooseTransport(t *testing.T) {
	noPosixFD := func(gpu int) *topotest.Machine {
		m := topotest.Mixed()
		m.GPUs[gpu].PosixFD = false
		return m
	}
	tests := []struct {
		name       string
		machine    *topotest.Machine
		place      collectives.Placement
		forced     string
		gate       func() (bool, string)
		transport  string
		reason     string // substring
		nvls       bool
		nvlsReason string // exact
	}{
		{
			name: "h200x2 one process", machine: topotest.H200x2(), place: oneProc(0, 1), gate: closed,
			transport: "uva", reason: "one process",
			nvlsReason: "supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1",
		},
		{
			name: "h200x2 process per GPU, our GPU machine's environment", machine: topotest.H200x2(), place: perGPU(0, 1), gate: ourGPUBox,
			transport: "vmm", reason: "VMM with POSIX file descriptors",
			nvlsReason: "supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1",
		},
		{
			name: "h200x2 gate open, but two ranks", machine: topotest.H200x2(), place: perGPU(1, 0), gate: open,
			transport:  "vmm",
			nvlsReason: "supported and enabled, not used: 2 ranks, where NVLink peer access moves no more bytes than the switch",
		},
		{
			name: "h200x2 nil gate is closed", machine: topotest.H200x2(), place: perGPU(0, 1),
			transport: "vmm", nvlsReason: "supported by hardware, not enabled: no NVLS gate given",
		},
		{
			name: "hgx-h100 one process", machine: topotest.HGXH100(), place: oneProc(0, 1, 2, 3, 4, 5, 6, 7), gate: open,
			transport: "uva", nvls: true,
			nvlsReason: "supported and enabled: used in addition for the collectives and sizes that suit it",
		},
		{
			name: "hgx-h100 8 processes, gate closed", machine: topotest.HGXH100(), place: perGPU(0, 1, 2, 3, 4, 5, 6, 7), gate: closed,
			transport: "vmm", nvlsReason: "supported by hardware, not enabled: GOCCL_NVLS_ENABLE is not 1",
		},
		{
			name: "hgx-h100 8 processes, another library opted out", machine: topotest.HGXH100(), place: perGPU(0, 1, 2, 3, 4, 5, 6, 7), gate: optedOut,
			transport: "vmm", nvlsReason: "supported by hardware, not enabled: NCCL_NVLS_ENABLE=0",
		},
		{
			name: "hgx-h100 8 processes, gate open", machine: topotest.HGXH100(), place: perGPU(0, 1, 2, 3, 4, 5, 6, 7), gate: open,
			transport: "vmm", nvls: true,
			nvlsReason: "supported and enabled: used in addition for the collectives and sizes that suit it",
		},
		{
			name: "hgx-h100 forced ipc", machine: topotest.HGXH100(), place: perGPU(0, 1, 2), forced: "ipc", gate: open,
			transport: "ipc", reason: "forced by GOCCL_TRANSPORT=ipc", nvls: true,
			nvlsReason: "supported and enabled: used in addition for the collectives and sizes that suit it",
		},
		{
			name: "hgx-h100 forced nvls, gate open", machine: topotest.HGXH100(), place: perGPU(0, 1, 2, 3), forced: "NVLS", gate: open,
			transport: "nvls", reason: "forced by GOCCL_TRANSPORT=nvls", nvls: true,
			nvlsReason: "supported and enabled: used in addition for the collectives and sizes that suit it",
		},
		{
			name: "h200x2 forced nvls overrides the two-rank rule", machine: topotest.H200x2(), place: perGPU(0, 1), forced: "nvls", gate: open,
			transport: "nvls", nvls: true,
			nvlsReason: "supported and enabled: used in addition for the collectives and sizes that suit it",
		},
		{
			name: "pcie4 pair on one node", machine: topotest.PCIe4(), place: perGPU(0, 1), gate: open,
			transport: "vmm", nvlsReason: "not supported by hardware: GPU0 has no multicast",
		},
		{
			name: "pcie4 pair on the other node, one process", machine: topotest.PCIe4(), place: oneProc(2, 3), gate: open,
			transport: "uva", nvlsReason: "not supported by hardware: GPU2 has no multicast",
		},
		{
			name: "pcie4 single rank", machine: topotest.PCIe4(), place: perGPU(3), gate: open,
			transport: "vmm", nvlsReason: "not supported by hardware: GPU3 has no multicast",
		},
		{
			name: "mixed box, all four", machine: topotest.Mixed(), place: perGPU(0, 1, 2, 3), gate: open,
			transport: "vmm", nvlsReason: "not supported by hardware: GPU0 has no multicast",
		},
		{
			name: "mixed box, one GPU without POSIX fds", machine: noPosixFD(3), place: perGPU(0, 1, 2, 3), gate: open,
			transport: "ipc", reason: "GPU3 lacks VMM with POSIX file descriptors",
			nvlsReason: "not supported by hardware: GPU0 has no multicast",
		},
		{
			name: "mixed box, the GPU without POSIX fds unused", machine: noPosixFD(3), place: perGPU(2, 0), gate: open,
			transport: "vmm", nvlsReason: "not supported by hardware: GPU2 has no multicast",
		},
		{
			name: "host backend", machine: topotest.NoGPU(), place: collectives.Placement{NRanks: 4}, gate: open,
			transport: "shm", reason: "host backend", nvlsReason: "host backend",
		},
		{
			name: "host backend forced shm", machine: topotest.NoGPU(), place: collectives.Placement{NRanks: 2}, forced: "shm",
			transport: "shm", reason: "forced by GOCCL_TRANSPORT=shm", nvlsReason: "host backend",
		},
		{
			name: "host backend on a GPU machine", machine: topotest.H200x2(), place: collectives.Placement{NRanks: 3},
			transport: "shm", nvlsReason: "host backend",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := probe(t, tt.machine)
			ch, err := collectives.ChooseTransport(f, tt.place, tt.forced, tt.gate)
			require.NoError(t, err)
			assert.Equal(t, tt.transport, ch.Transport)
			assert.Contains(t, ch.Reason, tt.reason)
			assert.NotEmpty(t, ch.Reason)
			assert.Equal(t, tt.nvls, ch.NVLS)
			assert.Equal(t, tt.nvlsReason, ch.NVLSReason)

			// Every rank decides from the facts it received as JSON: same answer.
			raw, err := json.Marshal(f)
			require.NoError(t, err)
			var peer topology.Facts
			require.NoError(t, json.Unmarshal(raw, &peer))
			again, err := collectives.ChooseTransport(&peer, tt.place, tt.forced, tt.gate)
			require.NoError(t, err)
			assert.Equal(t, ch, again)
		})
	}
}

func TestChooseTransportErrors(t *testing.T) {
	noIPC := topotest.Mixed()
	noIPC.GPUs[3].PosixFD = false
	noIPC.GPUs[3].UVA = false // no unified addressing: no IPC either
	tests := []struct {
		name    string
		machine *topotest.Machine
		place   collectives.Placement
		forced  string
		gate    func() (bool, string)
		is      error
		msg     []string
	}{
		{
			name: "unknown transport", machine: topotest.H200x2(), place: perGPU(0, 1), forced: "nvlink",
			is: collectives.ErrInvalidArgument, msg: []string{`GOCCL_TRANSPORT="nvlink"`, "uva, ipc, vmm, nvls or shm"},
		},
		{
			name: "uva across processes", machine: topotest.H200x2(), place: perGPU(0, 1), forced: "uva",
			is: collectives.ErrTransportUnsupported, msg: []string{"GOCCL_TRANSPORT=uva", "several processes"},
		},
		{
			name: "vmm without POSIX fds", machine: func() *topotest.Machine { m := topotest.Mixed(); m.GPUs[1].PosixFD = false; return m }(),
			place: perGPU(0, 1), forced: "vmm",
			is: collectives.ErrTransportUnsupported, msg: []string{"GOCCL_TRANSPORT=vmm", "GPU1 lacks VMM"},
		},
		{
			name: "ipc inside one process", machine: topotest.H200x2(), place: oneProc(0, 1), forced: "ipc",
			is: collectives.ErrTransportUnsupported, msg: []string{"GOCCL_TRANSPORT=ipc", "one process"},
		},
		{
			name: "nvls forced, gate closed", machine: topotest.HGXH100(), place: perGPU(0, 1, 2, 3), forced: "nvls", gate: closed,
			is: collectives.ErrTransportUnsupported, msg: []string{"GOCCL_TRANSPORT=nvls", "GOCCL_NVLS_ENABLE is not 1"},
		},
		{
			name: "nvls forced without multicast", machine: topotest.Mixed(), place: perGPU(0, 1, 2), forced: "nvls", gate: open,
			is: collectives.ErrTransportUnsupported, msg: []string{"GPU0 has no multicast"},
		},
		{
			name: "shm forced on GPUs", machine: topotest.H200x2(), place: perGPU(0, 1), forced: "shm",
			is: collectives.ErrTransportUnsupported, msg: []string{"host backend"},
		},
		{
			name: "GPU transport forced on the host backend", machine: topotest.NoGPU(), place: collectives.Placement{NRanks: 2}, forced: "vmm",
			is: collectives.ErrTransportUnsupported, msg: []string{"needs GPUs"},
		},
		{
			name: "pcie4 across NUMA nodes", machine: topotest.PCIe4(), place: perGPU(0, 1, 2, 3),
			is: collectives.ErrNoPeerAccess, msg: []string{"GPU0 (rank 0) cannot access GPU2 (rank 2) over SYS"},
		},
		{
			name: "pcie4 across NUMA nodes in one process", machine: topotest.PCIe4(), place: oneProc(3, 1),
			is: collectives.ErrNoPeerAccess, msg: []string{"GPU3 (rank 0) cannot access GPU1 (rank 1) over SYS"},
		},
		{
			name: "neither VMM nor IPC", machine: noIPC, place: perGPU(0, 3),
			is: collectives.ErrTransportUnsupported, msg: []string{"GPU3 supports neither"},
		},
		{
			name: "no UVA in one process", machine: noIPC, place: oneProc(0, 3),
			is: collectives.ErrTransportUnsupported, msg: []string{"GPU3 lacks unified addressing"},
		},
		{
			name: "GPU out of range", machine: topotest.H200x2(), place: perGPU(0, 2),
			is: collectives.ErrInvalidArgument, msg: []string{"rank 1 on GPU2", "2 GPUs"},
		},
		{
			name: "two ranks on one GPU", machine: topotest.H200x2(), place: perGPU(1, 1),
			is: collectives.ErrInvalidArgument, msg: []string{"ranks 0 and 1 both on GPU1"},
		},
		{
			name: "devices do not match ranks", machine: topotest.H200x2(),
			place: collectives.Placement{NRanks: 3, Devices: []int{0, 1}},
			is:    collectives.ErrInvalidArgument, msg: []string{"2 devices for 3 ranks"},
		},
		{
			name: "no ranks", machine: topotest.H200x2(), place: collectives.Placement{},
			is: collectives.ErrInvalidArgument, msg: []string{"0 ranks"},
		},
		{
			name: "GPU ranks on a machine without GPUs", machine: topotest.NoGPU(), place: perGPU(0),
			is: collectives.ErrInvalidArgument, msg: []string{"no CUDA driver found"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := collectives.ChooseTransport(probe(t, tt.machine), tt.place, tt.forced, tt.gate)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.is)
			for _, m := range tt.msg {
				assert.Contains(t, err.Error(), m)
			}
			assert.Equal(t, collectives.Choice{}, ch)
		})
	}
}
