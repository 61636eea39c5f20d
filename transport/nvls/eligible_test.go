package nvls

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport/transporttest"
)

func good() RankFacts { return RankFacts{Multicast: true, VMM: true, PosixFD: true, Gate: true} }

func TestEligible(t *testing.T) {
	with := func(n int, r int, f func(*RankFacts)) []RankFacts {
		out := make([]RankFacts, n)
		for i := range out {
			out[i] = good()
		}
		if f != nil {
			f(&out[r])
		}
		return out
	}
	cases := []struct {
		name  string
		ranks []RankFacts
		ok    bool
		why   string // substring of the reason
	}{
		{"3 ranks all good", with(3, 0, nil), true, ""},
		{"8 ranks all good", with(8, 0, nil), true, ""},
		{"2 ranks", with(2, 0, nil), false, "at least 3 ranks, have 2"},
		{"1 rank", with(1, 0, nil), false, "have 1"},
		{"no multicast on rank 2", with(4, 2, func(f *RankFacts) { f.Multicast = false }), false, "rank 2: multicast"},
		{"no VMM on rank 1", with(3, 1, func(f *RankFacts) { f.VMM = false }), false, "rank 1: virtual memory"},
		{"no POSIX fd on rank 0", with(3, 0, func(f *RankFacts) { f.PosixFD = false }), false, "rank 0: POSIX fd"},
		{"gate closed on rank 1", with(3, 1, func(f *RankFacts) { f.Gate, f.GateWhy = false, "NVSHMEM_DISABLE_NVLS=1" }),
			false, "rank 1: NVSHMEM_DISABLE_NVLS=1"},
		{"gate reason wins over rank count", with(2, 0, func(f *RankFacts) { f.Gate, f.GateWhy = false, "GOCCL_NVLS_ENABLE is not 1" }),
			false, "GOCCL_NVLS_ENABLE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, why := Eligible(c.ranks)
			assert.Equal(t, c.ok, ok)
			if c.ok {
				assert.Empty(t, why)
			} else {
				assert.Contains(t, why, c.why)
			}
		})
	}
}

// attrDriver answers device attributes only: Probe must call nothing else.
type attrDriver struct {
	cuda.Driver
	attrs map[cuda.DeviceAttribute]int
	fail  map[cuda.DeviceAttribute]bool
	asked []cuda.DeviceAttribute
}

func (d *attrDriver) DeviceAttribute(dev cuda.Device, a cuda.DeviceAttribute) (int, error) {
	d.asked = append(d.asked, a)
	if d.fail[a] {
		return 0, errors.New("CUDA_ERROR_INVALID_VALUE")
	}
	return d.attrs[a], nil
}

func TestProbe(t *testing.T) {
	all := map[cuda.DeviceAttribute]int{cuda.AttrMulticastSupported: 1, cuda.AttrVirtualMemoryManagement: 1, cuda.AttrHandleTypePosixFDSupported: 1}
	cases := []struct {
		name    string
		attrs   map[cuda.DeviceAttribute]int
		fail    map[cuda.DeviceAttribute]bool
		getenv  func(string) string
		want    RankFacts
		wantErr bool
	}{
		{"all supported, gate open", all, nil, openGate, good(), false},
		{"gate closed", all, nil, func(string) string { return "" },
			RankFacts{Multicast: true, VMM: true, PosixFD: true, GateWhy: "GOCCL_NVLS_ENABLE is not 1"}, false},
		{"no multicast", map[cuda.DeviceAttribute]int{cuda.AttrVirtualMemoryManagement: 1, cuda.AttrHandleTypePosixFDSupported: 1},
			nil, openGate, RankFacts{VMM: true, PosixFD: true, Gate: true}, false},
		{"old driver without the attribute", all, map[cuda.DeviceAttribute]bool{cuda.AttrMulticastSupported: true},
			openGate, RankFacts{VMM: true, PosixFD: true, Gate: true}, false},
		{"VMM query fails", all, map[cuda.DeviceAttribute]bool{cuda.AttrVirtualMemoryManagement: true}, openGate, RankFacts{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &attrDriver{attrs: c.attrs, fail: c.fail}
			f, err := Probe(d, 0, c.getenv)
			if c.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, f)
		})
	}
}

func TestAgreeEligibility(t *testing.T) {
	cases := []struct {
		name  string
		ranks []RankFacts
	}{
		{"all good", []RankFacts{good(), good(), good()}},
		{"one without multicast", []RankFacts{good(), {VMM: true, PosixFD: true, Gate: true}, good()}},
		{"one with the gate closed", []RankFacts{good(), good(), {Multicast: true, VMM: true, PosixFD: true, GateWhy: "NCCL_NVLS_ENABLE=0"}, good()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(c.ranks)
			g := transporttest.NewGroup(n)
			oks, whys := make([]bool, n), make([]string, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					var err error
					oks[r], whys[r], err = Agree(context.Background(), g.Rank(r), c.ranks[r])
					assert.NoError(t, err)
				}(r)
			}
			wg.Wait()
			wantOK, wantWhy := Eligible(c.ranks)
			for r := 0; r < n; r++ {
				assert.Equal(t, wantOK, oks[r], "rank %d", r)
				assert.Equal(t, wantWhy, whys[r], "rank %d", r)
			}
		})
	}
}
