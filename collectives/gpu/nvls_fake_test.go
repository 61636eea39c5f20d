package gpu

import (
	"context"
	"strings"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/nvls/nvlstest"
)

// A fake node with NVSwitch multicast for the NVLS selection tests: every
// rank's mcDriver shares one nvlstest.Node, which holds the multicast
// objects, memory, reservations and mappings, enforces the driver's
// ordering rules and counts every Multicast* call, so that the gate tests
// can show there were none.

// newMCNode returns a node whose multicast and allocation granularity are
// both gran.
func newMCNode(gran uint64) *nvlstest.Node { return nvlstest.NewNode(gran, gran) }

// mcDriver is one rank's fake driver: the backend fake (streams, launches,
// ops) plus VMM and multicast on the shared node. FailCall names a call
// (as recorded in Calls) that fails the first time.
type mcDriver struct {
	*fakeDriver
	*nvlstest.Driver
	multicast bool   // what CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED says
	mcVA      uint64 // where this rank mapped the multicast handle
	ucVA      uint64 // and its own memory
}

func newMCDriver(node *nvlstest.Node, rank int) *mcDriver {
	return &mcDriver{fakeDriver: newFakeDriver(), Driver: nvlstest.NewDriver(node, rank), multicast: true}
}

func (d *mcDriver) DeviceAttribute(_ cuda.Device, a cuda.DeviceAttribute) (int, error) {
	if a == cuda.AttrMulticastSupported && !d.multicast {
		return 0, nil
	}
	return 1, nil
}

// ModuleGetFunction fails an NVLS kernel's lookup when told to.
func (d *mcDriver) ModuleGetFunction(ctx cuda.Context, m cuda.Module, name string) (cuda.Function, error) {
	if strings.HasPrefix(name, "goccl_nvls_") {
		if err := d.Call("ModuleGetFunction nvls"); err != nil {
			return 0, err
		}
	}
	return d.fakeDriver.ModuleGetFunction(ctx, m, name)
}

// LaunchKernel is the fake driver's (both embedded types have one).
func (d *mcDriver) LaunchKernel(ctx cuda.Context, fn cuda.Function, cfg cuda.LaunchConfig, params []byte) error {
	return d.fakeDriver.LaunchKernel(ctx, fn, cfg, params)
}

// MemMap also notes where the multicast handle and the rank's own memory
// went, for the simulator.
func (d *mcDriver) MemMap(ctx cuda.Context, p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	mc := d.Node.IsMulticast(h)
	if err := d.Driver.MemMap(ctx, p, size, h); err != nil {
		return err
	}
	if mc {
		d.mcVA = uint64(p)
	} else {
		d.ucVA = uint64(p)
	}
	return nil
}

// orderMapper notes the workspace's Free in the driver's call log, so a
// test can check that the multicast team goes first.
type orderMapper struct {
	*fakeMapper
	d *mcDriver
}

func (m *orderMapper) Free(ctx context.Context, r *transport.Region) error {
	m.d.Calls = append(m.d.Calls, "mapper.Free")
	return m.fakeMapper.Free(ctx, r)
}
