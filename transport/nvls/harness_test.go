package nvls

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/nvls/nvlstest"
	"github.com/goccl/goccl/transport/transporttest"
)

// openGate is a test environment with the opt-in set and no opt-out; it is
// a map, never the process environment.
func openGate(k string) string {
	if k == "GOCCL_NVLS_ENABLE" {
		return "1"
	}
	return ""
}

// recBoot records bootstrap calls into the rank's driver log, so the
// sequence tests see where the agreements and fd passing fall between
// driver calls. failSendTo makes SendFDs to that peer fail without sending;
// failRecv makes RecvFDs fail after receiving (closing what came).
type recBoot struct {
	transport.Bootstrap
	d          *fakeDriver
	failSendTo int
	failRecv   bool
}

func (b *recBoot) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	b.d.Calls = append(b.d.Calls, "AllGather")
	return b.Bootstrap.AllGather(ctx, data)
}

func (b *recBoot) Barrier(ctx context.Context) error {
	b.d.Calls = append(b.d.Calls, "Barrier")
	return b.Bootstrap.Barrier(ctx)
}

func (b *recBoot) SendFDs(ctx context.Context, peer int, fds []int) error {
	b.d.Calls = append(b.d.Calls, fmt.Sprintf("SendFDs %d", peer))
	if peer == b.failSendTo {
		return fmt.Errorf("send to %d: %w", peer, nvlstest.ErrInjected)
	}
	return b.Bootstrap.SendFDs(ctx, peer, fds)
}

func (b *recBoot) RecvFDs(ctx context.Context, peer, n int) ([]int, error) {
	b.d.Calls = append(b.d.Calls, fmt.Sprintf("RecvFDs %d", peer))
	fds, err := b.Bootstrap.RecvFDs(ctx, peer, n)
	if err == nil && b.failRecv {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("recv: %w", nvlstest.ErrInjected)
	}
	return fds, err
}

// team is n fake ranks on one fake node.
type team struct {
	sys   *nvlstest.Node
	drv   []*fakeDriver
	boots []*recBoot
	cfg   []Config
}

func newTeam(n int, mcGran, vmmGran, size uint64) *team {
	g := transporttest.NewGroup(n)
	t := &team{sys: nvlstest.NewNode(mcGran, vmmGran)}
	for r := 0; r < n; r++ {
		d := newFakeDriver(t.sys, r)
		t.drv = append(t.drv, d)
		t.boots = append(t.boots, &recBoot{Bootstrap: g.Rank(r), d: d, failSendTo: -1})
		t.cfg = append(t.cfg, Config{Driver: d, Ctx: d.Ctx, Device: d.Dev, Size: size, Getenv: openGate})
	}
	return t
}

// setup runs Setup on every rank at once, bounded by timeout.
func (tm *team) setup(t *testing.T, timeout time.Duration) ([]*Region, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n := len(tm.drv)
	regs, errs := make([]*Region, n), make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			regs[r], errs[r] = Setup(ctx, tm.boots[r], tm.cfg[r])
		}(r)
	}
	wg.Wait()
	return regs, errs
}

// close runs Close on every non-nil region at once.
func (tm *team) close(t *testing.T, regs []*Region) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := make([]error, len(regs))
	var wg sync.WaitGroup
	for r, g := range regs {
		if g == nil {
			continue
		}
		wg.Add(1)
		go func(r int, g *Region) {
			defer wg.Done()
			errs[r] = g.Close(ctx)
		}(r, g)
	}
	wg.Wait()
	return errs
}

// expectedSetup is the exact call sequence of rank r of n: driver calls
// interleaved with the bootstrap calls, derived from the lifecycle in the
// brief rather than from the code.
func expectedSetup(r, n int) []string {
	seq := []string{"MulticastGetGranularity", "MemGetAllocationGranularity", "AllGather"}
	if r == 0 {
		seq = append(seq, "MulticastCreate", "MemExportToFD", "AllGather")
		for p := 1; p < n; p++ {
			seq = append(seq, fmt.Sprintf("SendFDs %d", p))
		}
	} else {
		seq = append(seq, "AllGather", "RecvFDs 0", "MemImportFromFD")
	}
	seq = append(seq, "MulticastAddDevice", "AllGather",
		"MemCreate", "MulticastBindMem",
		"MemAddressReserve", "MemMap mc", "MemSetAccess",
		"MemAddressReserve", "MemMap mem", "MemSetAccess",
		"AllGather")
	return seq
}

// expectedClose is the teardown of a complete team member.
func expectedClose() []string {
	return []string{"Barrier",
		"MemUnmap mem", "MemAddressFree", "MemUnmap mc", "MemAddressFree",
		"MulticastUnbind", "MemRelease mem", "MemRelease mc"}
}

// driverCalls drops the bootstrap entries from a sequence.
func driverCalls(seq []string) []string {
	var out []string
	for _, s := range seq {
		switch {
		case s == "AllGather", s == "Barrier", len(s) > 7 && (s[:7] == "SendFDs" || s[:7] == "RecvFDs"):
			continue
		}
		out = append(out, s)
	}
	return out
}
