package nvls

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/nvls/nvlstest"
)

const mib = 1 << 20

// requireClean asserts that nothing the fake driver hands out is still
// held and that the process holds exactly the descriptors it held before.
func requireClean(t *testing.T, tm *team, fds0 int) {
	t.Helper()
	h, res, maps, binds := tm.sys.Live()
	assert.Zero(t, h, "live handles")
	assert.Zero(t, res, "live reservations")
	assert.Zero(t, maps, "live mappings")
	assert.Zero(t, binds, "live bindings")
	assert.Equal(t, fds0, nvlstest.CountFDs(), "open descriptors")
}

func baselineFDs() int {
	nvlstest.CountFDs() // let the runtime open whatever it opens on first use
	return nvlstest.CountFDs()
}

func TestSetupSequence(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			fds0 := baselineFDs()
			tm := newTeam(n, 2*mib, 2*mib, 3*mib)
			regs, errs := tm.setup(t, 5*time.Second)
			for r := 0; r < n; r++ {
				require.NoError(t, errs[r], "rank %d", r)
				g := regs[r]
				assert.Equal(t, uint64(4*mib), g.Size, "rank %d size", r)
				assert.Equal(t, uint64(2*mib), g.Align)
				assert.Equal(t, r, g.Rank)
				assert.Equal(t, n, g.NRanks)
				assert.NotZero(t, g.Multicast)
				assert.NotZero(t, g.Unicast)
				assert.NotEqual(t, g.Multicast, g.Unicast)
				assert.Zero(t, uint64(g.Multicast)%g.Align, "multicast VA aligned")
				assert.Zero(t, uint64(g.Unicast)%g.Align, "unicast VA aligned")
				assert.Equal(t, expectedSetup(r, n), tm.drv[r].Calls, "rank %d setup calls", r)
			}
			// One object, every device in it and bound.
			require.Len(t, tm.sys.Created(), 1)
			mc := tm.sys.Created()[0]
			assert.Equal(t, uint32(n), mc.Want)
			assert.Len(t, mc.Devices, n)
			assert.Len(t, mc.Bindings, n)
			// Rank 0's exported fd and every received fd are already closed.
			assert.Equal(t, fds0, nvlstest.CountFDs(), "descriptors after setup")

			for r := range tm.drv {
				tm.drv[r].Calls = nil
			}
			for r, err := range tm.close(t, regs) {
				require.NoError(t, err, "rank %d close", r)
				assert.Equal(t, expectedClose(), tm.drv[r].Calls, "rank %d close calls", r)
			}
			requireClean(t, tm, fds0)
			require.ErrorIs(t, regs[0].Close(t.Context()), transport.ErrClosed)
		})
	}
}

func TestSetupGranularityRounding(t *testing.T) {
	cases := []struct {
		name              string
		mcGran, vmmGran   uint64
		rank2MC           uint64 // rank 2's own multicast granularity, 0: same
		size              uint64
		wantSize, wantAli uint64
	}{
		{"one byte", 2 * mib, 2 * mib, 0, 1, 2 * mib, 2 * mib},
		{"exact", 2 * mib, 2 * mib, 0, 6 * mib, 6 * mib, 2 * mib},
		{"one over", 2 * mib, 2 * mib, 0, 6*mib + 1, 8 * mib, 2 * mib},
		{"recommended multicast larger", 512 * mib, 2 * mib, 0, 1 * mib, 512 * mib, 512 * mib},
		{"vmm larger", 2 * mib, 4 * mib, 0, 3 * mib, 4 * mib, 4 * mib},
		{"not powers of two", 6 * mib, 4 * mib, 0, 1, 12 * mib, 12 * mib},
		{"ranks differ", 2 * mib, 2 * mib, 8 * mib, 3 * mib, 8 * mib, 8 * mib},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTeam(3, c.mcGran, c.vmmGran, c.size)
			tm.drv[2].MCGran = c.rank2MC
			regs, errs := tm.setup(t, 5*time.Second)
			for r := range regs {
				require.NoError(t, errs[r], "rank %d", r)
				assert.Equal(t, c.wantSize, regs[r].Size, "rank %d", r)
				assert.Equal(t, c.wantAli, regs[r].Align, "rank %d", r)
			}
			// Independent check of the rounding rule.
			assert.Zero(t, c.wantSize%c.mcGran)
			assert.Zero(t, c.wantSize%c.vmmGran)
			assert.GreaterOrEqual(t, c.wantSize, c.size)
			assert.Less(t, c.wantSize-c.size, c.wantAli)
			for _, err := range tm.close(t, regs) {
				require.NoError(t, err)
			}
		})
	}
}

// TestSetupFailureAtEveryStep fails each driver call of Setup, one at a
// time, on one rank; every rank must return an error naming the failing
// rank and step, and nothing may remain allocated or open.
func TestSetupFailureAtEveryStep(t *testing.T) {
	const n = 3
	stepOf := map[string]Step{
		"MulticastGetGranularity":     StepMCGranularity,
		"MemGetAllocationGranularity": StepVMMGranularity,
		"MulticastCreate":             StepCreate,
		"MemExportToFD":               StepExport,
		"MemImportFromFD":             StepImport,
		"MulticastAddDevice":          StepAddDevice,
		"MemCreate":                   StepMemCreate,
		"MulticastBindMem":            StepBind,
	}
	stepOfNth := map[string][2]Step{
		"MemAddressReserve": {StepReserveMC, StepReserveUC},
		"MemMap mc":         {StepMapMC},
		"MemMap mem":        {StepMapUC},
		"MemSetAccess":      {StepAccessMC, StepAccessUC},
	}
	fds0 := baselineFDs()
	for _, failRank := range []int{0, 1, n - 1} {
		seen := map[string]int{}
		for _, call := range driverCalls(expectedSetup(failRank, n)) {
			seen[call]++
			nth := seen[call]
			want, ok := stepOf[call]
			if !ok {
				want = stepOfNth[call][nth-1]
			}
			t.Run(fmt.Sprintf("%s/rank%d", want, failRank), func(t *testing.T) {
				tm := newTeam(n, 2*mib, 2*mib, 5*mib)
				tm.drv[failRank].FailCall, tm.drv[failRank].FailNth = call, nth
				regs, errs := tm.setup(t, 5*time.Second)
				for r := 0; r < n; r++ {
					require.Nil(t, regs[r], "rank %d got a region", r)
					require.Error(t, errs[r], "rank %d", r)
					var se *StepError
					require.ErrorAs(t, errs[r], &se, "rank %d", r)
					assert.Equal(t, failRank, se.Rank, "rank %d blames", r)
					assert.Equal(t, want, se.Step, "rank %d step", r)
					assert.Contains(t, errs[r].Error(), string(want))
					if r == failRank {
						assert.ErrorIs(t, errs[r], nvlstest.ErrInjected)
					} else {
						assert.ErrorIs(t, errs[r], ErrPeerFailed)
					}
				}
				requireClean(t, tm, fds0)
			})
		}
	}
}

// TestSetupFDPassingFailures breaks the bootstrap's fd passing: a send
// from rank 0 and a receive on rank 1.
func TestSetupFDPassingFailures(t *testing.T) {
	fds0 := baselineFDs()
	cases := []struct {
		name      string
		breakTeam func(tm *team)
		failRank  int
		step      Step
		timeout   time.Duration
	}{
		{"send to rank 2", func(tm *team) { tm.boots[0].failSendTo = 2 }, 0, StepSendFD, 300 * time.Millisecond},
		{"send to rank 1, rank 2 still served", func(tm *team) { tm.boots[0].failSendTo = 1 }, 0, StepSendFD, 300 * time.Millisecond},
		{"receive on rank 1", func(tm *team) { tm.boots[1].failRecv = true }, 1, StepRecvFD, 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTeam(3, 2*mib, 2*mib, 2*mib)
			c.breakTeam(tm)
			regs, errs := tm.setup(t, c.timeout)
			var se *StepError
			for r := range regs {
				require.Nil(t, regs[r])
				require.Error(t, errs[r], "rank %d", r)
			}
			require.ErrorAs(t, errs[c.failRank], &se)
			assert.Equal(t, c.step, se.Step)
			assert.Equal(t, c.failRank, se.Rank)
			requireClean(t, tm, fds0)
		})
	}
}

func TestSetupGateClosed(t *testing.T) {
	optedOut := func(k string) string { // the project's GPU machines' environment, plus the opt-in
		return map[string]string{
			"GOCCL_NVLS_ENABLE": "1", "NCCL_NVLS_ENABLE": "0",
			"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
		}[k]
	}
	closed := func(string) string { return "" }
	cases := []struct {
		name   string
		getenv []func(string) string
	}{
		{"closed everywhere", []func(string) string{closed, closed, closed}},
		{"opt-outs everywhere", []func(string) string{optedOut, optedOut, optedOut}},
		{"closed on rank 1", []func(string) string{openGate, closed, openGate}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTeam(3, 2*mib, 2*mib, 2*mib)
			for r := range tm.cfg {
				tm.cfg[r].Getenv = c.getenv[r]
			}
			regs, errs := tm.setup(t, 5*time.Second)
			for r := range regs {
				require.Nil(t, regs[r])
				open, _ := Gate(c.getenv[r])
				if !open {
					require.ErrorIs(t, errs[r], ErrGateClosed, "rank %d", r)
					// The safety property: a closed gate means no driver call.
					assert.Equal(t, []string{"AllGather"}, tm.drv[r].Calls, "rank %d", r)
				} else {
					require.ErrorIs(t, errs[r], ErrPeerFailed, "rank %d", r)
				}
				for _, call := range tm.drv[r].Calls {
					assert.NotEqual(t, "MulticastCreate", call)
				}
			}
			assert.Empty(t, tm.sys.Created())
		})
	}
}

func TestSetupBadConfig(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(tm *team)
		step   Step
	}{
		{"zero size", func(tm *team) { tm.cfg[1].Size = 0 }, StepConfig},
		{"nil driver", func(tm *team) { tm.cfg[2].Driver = nil }, StepConfig},
		{"sizes differ", func(tm *team) { tm.cfg[1].Size = 4 * mib }, StepAgreeSize},
		{"size overflows", func(tm *team) {
			for r := range tm.cfg {
				tm.cfg[r].Size = ^uint64(0) - 5
			}
		}, StepAgreeSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTeam(3, 2*mib, 2*mib, 2*mib)
			c.mutate(tm)
			regs, errs := tm.setup(t, 5*time.Second)
			for r := range regs {
				require.Nil(t, regs[r])
				var se *StepError
				require.ErrorAs(t, errs[r], &se, "rank %d", r)
				assert.Equal(t, c.step, se.Step, "rank %d: %v", r, errs[r])
			}
			assert.Empty(t, tm.sys.Created(), "nothing created")
		})
	}
}

// TestCloseReleaseFailure: a failing teardown call is reported with its
// step and rank, and every later release is still attempted.
func TestCloseReleaseFailure(t *testing.T) {
	tm := newTeam(3, 2*mib, 2*mib, 2*mib)
	regs, errs := tm.setup(t, 5*time.Second)
	for _, err := range errs {
		require.NoError(t, err)
	}
	for r := range tm.drv {
		tm.drv[r].Calls = nil
	}
	tm.drv[1].FailCall, tm.drv[1].FailNth = "MemUnmap mc", 1
	cerrs := tm.close(t, regs)
	require.NoError(t, cerrs[0])
	require.NoError(t, cerrs[2])
	var se *StepError
	require.ErrorAs(t, cerrs[1], &se)
	assert.Equal(t, StepUnmapMC, se.Step)
	assert.Equal(t, 1, se.Rank)
	assert.ErrorIs(t, cerrs[1], nvlstest.ErrInjected)
	// The reservation under the failed unmap cannot be freed; the rest goes.
	assert.Contains(t, cerrs[1].Error(), string(StepFreeMC))
	assert.Equal(t, expectedClose(), tm.drv[1].Calls)
	h, res, maps, _ := tm.sys.Live()
	assert.Equal(t, 0, h, "handles")
	assert.Equal(t, 1, res, "the multicast reservation stays")
	assert.Equal(t, 1, maps, "its mapping stays")
}
