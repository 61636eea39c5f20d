package nvls

import (
	"context"
	"fmt"
	"os"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// MinRanks is the smallest team NVLS is used for: with two GPUs a direct
// peer-to-peer exchange moves as few bytes and needs no multicast object.
const MinRanks = 3

// RankFacts is what one rank contributes to the NVLS decision. Probe fills
// it from device attributes (harmless queries, never a multicast call) and
// the gate; Agree gathers every rank's so that all decide alike.
type RankFacts struct {
	Multicast bool   // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
	VMM       bool   // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	PosixFD   bool   // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
	Gate      bool   // Gate was open in this rank's environment
	GateWhy   string // why it was closed
}

// Probe reads this rank's facts. getenv nil means os.Getenv. A driver that
// does not know the multicast attribute (older than CUDA 12.1) reports no
// multicast rather than an error.
func Probe(drv cuda.Driver, dev cuda.Device, getenv func(string) string) (RankFacts, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var f RankFacts
	f.Gate, f.GateWhy = Gate(getenv)
	if v, err := drv.DeviceAttribute(dev, cuda.AttrMulticastSupported); err == nil {
		f.Multicast = v != 0
	}
	v, err := drv.DeviceAttribute(dev, cuda.AttrVirtualMemoryManagement)
	if err != nil {
		return f, fmt.Errorf("nvls: device %d: VMM attribute: %w", dev, err)
	}
	f.VMM = v != 0
	v, err = drv.DeviceAttribute(dev, cuda.AttrHandleTypePosixFDSupported)
	if err != nil {
		return f, fmt.Errorf("nvls: device %d: POSIX fd attribute: %w", dev, err)
	}
	f.PosixFD = v != 0
	return f, nil
}

// Eligible says whether NVLS applies to a team whose rank r reported
// ranks[r], and when not, why (naming the rank). The gate comes first: it
// is the reason users most often need to see.
func Eligible(ranks []RankFacts) (ok bool, why string) {
	for r, f := range ranks {
		if !f.Gate {
			return false, fmt.Sprintf("rank %d: %s", r, f.GateWhy)
		}
	}
	if len(ranks) < MinRanks {
		return false, fmt.Sprintf("NVLS needs at least %d ranks, have %d", MinRanks, len(ranks))
	}
	for r, f := range ranks {
		switch {
		case !f.Multicast:
			return false, fmt.Sprintf("rank %d: multicast not supported by the device or driver", r)
		case !f.VMM:
			return false, fmt.Sprintf("rank %d: virtual memory management not supported", r)
		case !f.PosixFD:
			return false, fmt.Sprintf("rank %d: POSIX fd memory handles not supported", r)
		}
	}
	return true, ""
}

// Agree gathers every rank's facts over the bootstrap and applies
// Eligible to them, so that every rank reaches the same answer.
func Agree(ctx context.Context, b transport.Bootstrap, local RankFacts) (ok bool, why string, err error) {
	all, err := b.AllGather(ctx, local.marshal())
	if err != nil {
		return false, "", fmt.Errorf("nvls: agreeing on eligibility: %w", err)
	}
	ranks := make([]RankFacts, len(all))
	for r, m := range all {
		if ranks[r], err = unmarshalFacts(m); err != nil {
			return false, "", fmt.Errorf("nvls: facts of rank %d: %w", r, err)
		}
	}
	ok, why = Eligible(ranks)
	return ok, why, nil
}

const (
	factMulticast = 1 << iota
	factVMM
	factPosixFD
	factGate
)

func (f RankFacts) marshal() []byte {
	var bits byte
	for _, c := range []struct {
		on  bool
		bit byte
	}{{f.Multicast, factMulticast}, {f.VMM, factVMM}, {f.PosixFD, factPosixFD}, {f.Gate, factGate}} {
		if c.on {
			bits |= c.bit
		}
	}
	return append([]byte{bits}, f.GateWhy...)
}

func unmarshalFacts(m []byte) (RankFacts, error) {
	if len(m) == 0 {
		return RankFacts{}, fmt.Errorf("empty")
	}
	bits := m[0]
	return RankFacts{
		Multicast: bits&factMulticast != 0,
		VMM:       bits&factVMM != 0,
		PosixFD:   bits&factPosixFD != 0,
		Gate:      bits&factGate != 0,
		GateWhy:   string(m[1:]),
	}, nil
}
