package collectives

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/transport/nvls"
)

// Transport names, as GOCCL_TRANSPORT takes them.
const (
	TransportUVA  = "uva"  // one process: cuCtxEnablePeerAccess
	TransportIPC  = "ipc"  // processes: cuIpc* handles
	TransportVMM  = "vmm"  // processes: cuMemCreate + POSIX fds
	TransportNVLS = "nvls" // NVLink multicast, on top of VMM
	TransportSHM  = "shm"  // host backend: memfd shared memory
)

var (
	// ErrNoPeerAccess: two GPUs of the communicator cannot reach each
	// other's memory; goccl's transports all need peer access.
	ErrNoPeerAccess = errors.New("no peer access between GPUs")
	// ErrTransportUnsupported: the forced transport cannot work here.
	ErrTransportUnsupported = errors.New("transport not usable here")
)

// Placement says where a communicator's ranks are.
type Placement struct {
	NRanks int
	// SingleProcess: one process drives every rank (InitAll).
	SingleProcess bool
	// Devices[r] is the GPU index (into Facts.GPUs) rank r uses; empty for
	// the host backend.
	Devices []int
}

// Choice is how ranks reach each other's memory.
type Choice struct {
	Transport string `json:"transport"`
	Reason    string `json:"reason"`
	// NVLS: NVLink multicast is an additional path for the collectives and
	// sizes that suit it; NVLSReason says why it is or is not.
	NVLS       bool   `json:"nvls"`
	NVLSReason string `json:"nvls_reason"`
}

// ChooseTransport picks the transport from facts every rank agreed on, the
// placement, GOCCL_TRANSPORT's value (forced, "" for none) and the NVLS
// gate (nvls.Gate; nil means closed). It is a pure function of its inputs,
// so every rank reaches the same choice (DESIGN §2):
//   - host backend (no devices): shm;
//   - one process: uva;
//   - several processes: vmm where every GPU has VMM with POSIX fds, else ipc;
//   - NVLS in addition, only where every GPU supports multicast, there are
//     more than two ranks, and the gate is open.
func ChooseTransport(f *topology.Facts, place Placement, forced string, nvlsGate func() (bool, string)) (Choice, error) {
	forced = strings.ToLower(strings.TrimSpace(forced))
	switch forced {
	case "", TransportUVA, TransportIPC, TransportVMM, TransportNVLS, TransportSHM:
	default:
		return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=%q (want uva, ipc, vmm, nvls or shm)", ErrInvalidArgument, forced)
	}
	if place.NRanks < 1 {
		return Choice{}, fmt.Errorf("%w: %d ranks", ErrInvalidArgument, place.NRanks)
	}

	if len(place.Devices) == 0 {
		if forced != "" && forced != TransportSHM {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=%s needs GPUs; the host backend uses shm", ErrTransportUnsupported, forced)
		}
		reason := "host backend: memfd shared memory between processes"
		if forced == TransportSHM {
			reason = "forced by GOCCL_TRANSPORT=shm"
		}
		return Choice{Transport: TransportSHM, Reason: reason, NVLSReason: "host backend"}, nil
	}
	if forced == TransportSHM {
		return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=shm is the host backend's; GPU ranks use uva, ipc, vmm or nvls", ErrTransportUnsupported)
	}
	gpus, err := placedGPUs(f, place)
	if err != nil {
		return Choice{}, err
	}
	if err := checkPeerAccess(f, place); err != nil {
		return Choice{}, err
	}

	allCaps := func(ok func(topology.Caps) bool) (bool, int) {
		for _, g := range gpus {
			if !ok(f.GPUs[g].Caps) {
				return false, g
			}
		}
		return true, -1
	}
	vmmOK, noVMM := allCaps(func(c topology.Caps) bool { return c.VMM && c.PosixFD })
	ipcOK, noIPC := allCaps(func(c topology.Caps) bool { return c.IPC })
	uvaOK, noUVA := allCaps(func(c topology.Caps) bool { return c.UVA })

	var ch Choice
	switch forced {
	case "":
		switch {
		case place.SingleProcess:
			if !uvaOK {
				return Choice{}, fmt.Errorf("%w: GPU%d lacks unified addressing, which one process driving several GPUs needs", ErrTransportUnsupported, noUVA)
			}
			ch = Choice{Transport: TransportUVA, Reason: "one process drives every GPU: peer access over unified addressing"}
		case vmmOK:
			ch = Choice{Transport: TransportVMM, Reason: "every GPU supports VMM with POSIX file descriptors"}
		case ipcOK:
			ch = Choice{Transport: TransportIPC, Reason: fmt.Sprintf("GPU%d lacks VMM with POSIX file descriptors: falling back to CUDA IPC", noVMM)}
		default:
			return Choice{}, fmt.Errorf("%w: GPU%d supports neither VMM with POSIX fds nor CUDA IPC, and the ranks are in several processes", ErrTransportUnsupported, noIPC)
		}
	case TransportUVA:
		if !place.SingleProcess {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=uva needs one process driving every GPU; these ranks are in several processes (use vmm or ipc)", ErrTransportUnsupported)
		}
		if !uvaOK {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=uva: GPU%d lacks unified addressing", ErrTransportUnsupported, noUVA)
		}
		ch = Choice{Transport: TransportUVA, Reason: "forced by GOCCL_TRANSPORT=uva"}
	case TransportIPC:
		if place.SingleProcess && place.NRanks > 1 {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=ipc: CUDA IPC handles cannot be opened by the process that exported them; one process uses uva or vmm", ErrTransportUnsupported)
		}
		if !ipcOK {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=ipc: GPU%d does not support CUDA IPC", ErrTransportUnsupported, noIPC)
		}
		ch = Choice{Transport: TransportIPC, Reason: "forced by GOCCL_TRANSPORT=ipc"}
	case TransportVMM, TransportNVLS:
		if !vmmOK {
			return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=%s: GPU%d lacks VMM with POSIX file descriptors", ErrTransportUnsupported, forced, noVMM)
		}
		ch = Choice{Transport: forced, Reason: "forced by GOCCL_TRANSPORT=" + forced}
	}

	ch.NVLS, ch.NVLSReason = nvlsDecision(f, gpus, place.NRanks, vmmOK, forced == TransportNVLS, nvlsGate)
	if forced == TransportNVLS && !ch.NVLS {
		return Choice{}, fmt.Errorf("%w: GOCCL_TRANSPORT=nvls: %s", ErrTransportUnsupported, ch.NVLSReason)
	}
	return ch, nil
}

// placedGPUs validates the placement against the facts and returns the GPU
// indices in rank order.
func placedGPUs(f *topology.Facts, place Placement) ([]int, error) {
	if f == nil || len(f.GPUs) == 0 {
		reason := "no GPU found"
		if f != nil && f.NoGPUReason != "" {
			reason = f.NoGPUReason
		}
		return nil, fmt.Errorf("%w: ranks placed on GPUs, but %s", ErrInvalidArgument, reason)
	}
	if len(place.Devices) != place.NRanks {
		return nil, fmt.Errorf("%w: %d devices for %d ranks", ErrInvalidArgument, len(place.Devices), place.NRanks)
	}
	seen := make(map[int]int, len(place.Devices))
	for r, g := range place.Devices {
		if g < 0 || g >= len(f.GPUs) {
			return nil, fmt.Errorf("%w: rank %d on GPU%d, but there are %d GPUs", ErrInvalidArgument, r, g, len(f.GPUs))
		}
		if prev, dup := seen[g]; dup {
			return nil, fmt.Errorf("%w: ranks %d and %d both on GPU%d; each rank needs its own GPU", ErrInvalidArgument, prev, r, g)
		}
		seen[g] = r
	}
	return place.Devices, nil
}

// checkPeerAccess needs P2P both ways between every two ranks' GPUs.
func checkPeerAccess(f *topology.Facts, place Placement) error {
	for ra, a := range place.Devices {
		for rb, b := range place.Devices {
			if ra == rb {
				continue
			}
			l, _ := f.Link(a, b)
			if !l.P2P {
				path := l.Label
				if path == "" {
					path = string(l.Kind)
				}
				return fmt.Errorf("%w: GPU%d (rank %d) cannot access GPU%d (rank %d) over %s; goccl needs peer access between every pair",
					ErrNoPeerAccess, a, ra, b, rb, path)
			}
		}
	}
	return nil
}

// nvlsDecision says whether NVLS joins the base transport, and why or why
// not. Hardware comes first so that a reader learns whether opting in
// would help at all; the gate is consulted only where it could matter.
func nvlsDecision(f *topology.Facts, gpus []int, nranks int, vmmOK bool, forced bool, gate func() (bool, string)) (bool, string) {
	for _, g := range gpus {
		if !f.GPUs[g].Caps.Multicast {
			return false, fmt.Sprintf("not supported by hardware: GPU%d has no multicast", g)
		}
	}
	// The multicast team binds VMM memory of its own, whatever the base
	// transport for the other paths.
	if !vmmOK {
		return false, "supported by hardware, not usable: NVLS binds VMM memory exported as POSIX fds, which not every GPU offers"
	}
	open, why := false, "no NVLS gate given"
	if gate != nil {
		open, why = gate()
	}
	if !open {
		return false, "supported by hardware, not enabled: " + why
	}
	if nranks < nvls.MinRanks && !forced {
		return false, fmt.Sprintf("supported and enabled, not used: %d ranks, where NVLink peer access moves no more bytes than the switch", nranks)
	}
	return true, "supported and enabled: used in addition for the collectives and sizes that suit it"
}
