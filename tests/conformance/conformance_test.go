package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check/checktest"
	"github.com/goccl/goccl/internal/membuf"
)

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"--backend", "host", "--counts", "3,5", "--colls", "all_reduce,broadcast", "--types", "float32,bf16",
		"--ops", "sum", "--roots", "all", "--inplace", "only", "--seed", "9", "--large", "64Mi,1G", "--large-types", "int32",
		"--stress", "10", "--timeout", "1m"})
	require.NoError(t, err)
	assert.Equal(t, []int{3, 5}, c.counts)
	assert.Equal(t, []collectives.Collective{collectives.AllReduce, collectives.Broadcast}, c.colls)
	assert.Equal(t, []collectives.DataType{collectives.Float32, collectives.BFloat16}, c.types)
	assert.Equal(t, []int64{64 << 20, 1 << 30}, c.large)
	assert.Equal(t, []collectives.DataType{collectives.Int32}, c.largeTypes)
	assert.Equal(t, placeOnly, c.inplace)
	assert.Equal(t, uint64(9), c.seed)
	assert.Equal(t, time.Minute, c.timeout)

	c, err = parseConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 7, 4095, 1048579}, c.counts)
	assert.Len(t, c.colls, 5)
	assert.Len(t, c.types, 12)
	assert.Len(t, c.ops, 6)

	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--counts", "-5"}, "negative"},
		{[]string{"--counts", "x"}, "--counts"},
		{[]string{"--types", "float8"}, "--types"},
		{[]string{"--types", "f8e4m3,e4m2"}, "--types"},
		{[]string{"--colls", "all_to_all"}, "--colls"},
		{[]string{"--ops", "xor"}, "--ops"},
		{[]string{"--inplace", "maybe"}, "--inplace"},
		{[]string{"--roots", "x"}, "--roots"},
		{[]string{"--backend", "tpu"}, "--backend"},
		{[]string{"--roundings", "0"}, "--roundings"},
		{[]string{"--large", "huge"}, "--large"},
		{[]string{"--graph", "5", "--backend", "host"}, "--graph needs"},
		{[]string{"--register-user", "--backend", "host"}, "--register-user needs"},
		{[]string{"--register", "--register-user", "--backend", "gpu"}, "exclude each other"},
		{[]string{"--stress", "-1"}, ">= 0"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"extra"}, "unexpected"},
		{[]string{"--p2p", "broadcast"}, "--p2p"},
	}
	for _, tt := range bad {
		_, err := parseConfig(tt.args)
		require.ErrorIsf(t, err, errUsage, "%v", tt.args)
		assert.Containsf(t, err.Error(), tt.want, "%v", tt.args)
	}
}

func TestBuildCases(t *testing.T) {
	c, err := parseConfig([]string{"--counts", "1,7", "--types", "float32,int8", "--ops", "sum,max"})
	require.NoError(t, err)
	cs, err := buildCases(c, 3)
	require.NoError(t, err)
	// Per type and placement: all_reduce, reduce_scatter 2 ops; reduce 2
	// ops x 2 roots (0 and 2); broadcast 2 roots; all_gather 1.
	perType := 2 + 2 + 2*2 + 2 + 1
	require.Len(t, cs, perType*2*2*2)
	seeds := map[uint64]bool{}
	inPlace := 0
	for _, tc := range cs {
		require.NoError(t, tc.Validate())
		seeds[tc.Seed] = true
		if tc.inPlace {
			inPlace++
		}
		if tc.Coll.Rooted() {
			assert.Contains(t, []int{0, 2}, tc.Root)
		}
	}
	assert.Len(t, seeds, len(cs), "every case has fresh inputs")
	assert.Equal(t, len(cs)/2, inPlace)

	c.large = []int64{64 << 20}
	cs2, err := buildCases(c, 3)
	require.NoError(t, err)
	large := cs2[len(cs):]
	require.NotEmpty(t, large)
	for _, tc := range large {
		assert.Equal(t, (64<<20)/tc.Type.Size(), tc.Count)
		assert.Contains(t, []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int32}, tc.Type)
	}

	c.roots = "5"
	_, err = buildCases(c, 3)
	require.ErrorIs(t, err, errUsage)
}

// fakeRun runs the program's ranks over the in-process fake communicator.
func fakeRun(t *testing.T, n int, args []string, setup func(*checktest.Group)) (int, string, string) {
	t.Helper()
	cfg, err := parseConfig(args)
	require.NoError(t, err)
	g := checktest.NewGroup(n)
	if setup != nil {
		setup(g)
	}
	ranks := make([]bench.Rank, n)
	for r := range ranks {
		ranks[r] = bench.Rank{Comm: g.Rank(r), Space: membuf.NewHost()}
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := runRanks(ctx, cfg, ranks, &syncWriter{w: &out}, &errOut, nil)
	return code, out.String(), errOut.String()
}

func TestRunPasses(t *testing.T) {
	code, out, errOut := fakeRun(t, 3, []string{"--counts", "0,1,7,100", "--stress", "50"}, nil)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	for r := 0; r < 3; r++ {
		assert.Regexp(t, `conformance: rank `+string(rune('0'+r))+`: \d+ cases, 0 failed`, out)
	}
	assert.Contains(t, out, "conformance: all 3 ranks:")
	assert.Contains(t, out, " 0 failed\n")
}

func TestRunReportsWrongElement(t *testing.T) {
	// Call 5 is all_reduce int8 sum count 7 out-of-place... whichever it
	// is, one rank's last element is wrong and must be named.
	code, out, _ := fakeRun(t, 2, []string{"--counts", "7", "--colls", "all_reduce", "--types", "int32", "--ops", "sum,max", "--p2p", "none"},
		func(g *checktest.Group) { g.CorruptCall, g.CorruptRank = 3, 1 })
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "conformance: rank 1: FAIL all_reduce int32 count=7 nranks=2 op=max")
	assert.Contains(t, out, "1 of 7 elements wrong: [6] got")
	assert.Contains(t, out, "conformance: rank 1: 4 cases, 1 failed")
	assert.Contains(t, out, "conformance: rank 0: 4 cases, 0 failed")
	assert.Contains(t, out, "conformance: all 2 ranks: 8 cases, 1 failed")
}

func TestStressDetectsCorruption(t *testing.T) {
	// 5 collectives + 20 matrix cases; the corrupted call is the stress
	// run's last call on some buffer only if it lands last: corrupt the
	// final call, which is always some slot's last result.
	cfgArgs := []string{"--counts", "3", "--types", "float32", "--ops", "sum", "--inplace", "none", "--stress", "30"}
	cfg, err := parseConfig(cfgArgs)
	require.NoError(t, err)
	cs, err := buildCases(cfg, 2)
	require.NoError(t, err)
	code, out, _ := fakeRun(t, 2, cfgArgs, func(g *checktest.Group) { g.CorruptCall, g.CorruptRank = len(cs)+30, 0 })
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL after 30 mixed calls")
}

func TestGraphNeedsDevice(t *testing.T) {
	code, _, errOut := fakeRun(t, 2, []string{"--counts", "1", "--colls", "broadcast", "--types", "int8", "--graph", "3", "--backend", "auto"}, nil)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "CUDA graphs need a device space")
}

func TestGuardAndSendChecks(t *testing.T) {
	// A communicator that writes one element too many (past the output)
	// is caught even though the output itself is right.
	cfg, err := parseConfig([]string{"--counts", "4", "--colls", "broadcast", "--types", "uint8", "--inplace", "none"})
	require.NoError(t, err)
	g := checktest.NewGroup(2)
	ranks := []bench.Rank{{Comm: overrun{g.Rank(0)}, Space: membuf.NewHost()}, {Comm: overrun{g.Rank(1)}, Space: membuf.NewHost()}}
	var out bytes.Buffer
	code := runRanks(context.Background(), cfg, ranks, &syncWriter{w: &out}, &bytes.Buffer{}, nil)
	assert.Equal(t, 1, code)
	assert.True(t, strings.Contains(out.String(), "bytes written past the end of the output"), out.String())
}

// overrun runs the collective, then scribbles one byte past its output.
type overrun struct{ *checktest.Comm }

func (o overrun) Run(ctx context.Context, a *collectives.Args) error {
	if err := o.Comm.Run(ctx, a); err != nil {
		return err
	}
	b := (*[1 << 20]byte)(ptrOf(a.Recv))
	b[a.RecvBytes(o.Size())] ^= 0xFF
	return nil
}

// registering gives a fake communicator Alloc from host memory and counts
// what it hands out and gets back. A registered buffer reaches the program
// as a bare pointer (as device memory does); regSpace maps it back to the
// host mapping for the host space's copies.
type registering struct {
	*checktest.Comm
	space          *regSpace
	mu             sync.Mutex
	sizes          []int
	live, released int
	regd           map[uintptr]bool // Register: the buffers registered now
}

func (c *registering) Register(_ context.Context, ptr uintptr, size int) (func(context.Context) error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.regd == nil {
		return nil, errors.New("not used")
	}
	c.sizes = append(c.sizes, size)
	c.live++
	c.regd[ptr] = true
	return func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.live--
		c.released++
		delete(c.regd, ptr)
		return nil
	}, nil
}

// userSpace is a rank's own memory for --register-user: it counts the
// buffers freed while still registered (the peers could still map them).
type userSpace struct {
	*membuf.Host
	c     *registering
	early int
}

func (s *userSpace) Free(b membuf.Buffer) error {
	s.c.mu.Lock()
	if s.c.regd[b.Ptr] {
		s.early++
	}
	s.c.mu.Unlock()
	return s.Host.Free(b)
}

func (c *registering) Alloc(_ context.Context, size int) (uintptr, func(context.Context) error, error) {
	b, err := c.space.Host.Alloc(size)
	if err != nil {
		return 0, nil, err
	}
	c.space.add(b)
	c.mu.Lock()
	c.sizes = append(c.sizes, size)
	c.live++
	c.mu.Unlock()
	return b.Ptr, func(context.Context) error {
		c.mu.Lock()
		c.live--
		c.released++
		c.mu.Unlock()
		return c.space.Host.Free(b)
	}, nil
}

type regSpace struct {
	*membuf.Host
	mu   sync.Mutex
	bufs map[uintptr]membuf.Buffer
}

func (s *regSpace) add(b membuf.Buffer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bufs[b.Ptr] = b
}

func (s *regSpace) real(b membuf.Buffer) membuf.Buffer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.bufs[b.Ptr]; ok {
		return r
	}
	return b
}

func (s *regSpace) CopyIn(b membuf.Buffer, off int, src []byte) error {
	return s.Host.CopyIn(s.real(b), off, src)
}
func (s *regSpace) CopyOut(dst []byte, b membuf.Buffer, off int) error {
	return s.Host.CopyOut(dst, s.real(b), off)
}
func (s *regSpace) Fill(b membuf.Buffer, off, n int, v byte) error {
	return s.Host.Fill(s.real(b), off, n, v)
}

func TestRegisterAllocatesThroughTheCommunicator(t *testing.T) {
	g := checktest.NewGroup(3)
	cases := []struct {
		name string
		args []string
		// rank makes rank r's communicator and space; early, where the
		// space counts them, the buffers it freed while still registered.
		rank func(r int) (c *registering, rk bench.Rank, early func() int)
	}{
		{"--register: from the communicator's Alloc",
			[]string{"--register", "--counts", "0,5,100", "--colls", "broadcast,all_gather", "--types", "int32,float64"},
			func(r int) (*registering, bench.Rank, func() int) {
				sp := &regSpace{Host: membuf.NewHost(), bufs: map[uintptr]membuf.Buffer{}}
				c := &registering{Comm: g.Rank(r), space: sp}
				return c, bench.Rank{Comm: c, Space: sp}, nil
			}},
		// The rank's own buffers, registered, then released before the
		// space frees them.
		{"--register-user: the rank's own buffers, registered",
			[]string{"--register-user", "--counts", "0,5,100", "--colls", "all_reduce,all_gather", "--types", "int32,float64"},
			func(r int) (*registering, bench.Rank, func() int) {
				c := &registering{Comm: g.Rank(r), regd: map[uintptr]bool{}}
				sp := &userSpace{Host: membuf.NewHost(), c: c}
				return c, bench.Rank{Comm: c, Space: sp}, func() int { return sp.early }
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args)
			require.NoError(t, err)
			require.True(t, cfg.register || cfg.regUser)
			comms := make([]*registering, 3)
			ranks := make([]bench.Rank, 3)
			early := make([]func() int, 3)
			for r := range ranks {
				comms[r], ranks[r], early[r] = tc.rank(r)
			}
			var out, errOut bytes.Buffer
			code := runRanks(context.Background(), cfg, ranks, &syncWriter{w: &out}, &errOut, nil)
			require.Equal(t, 0, code, "%s\n%s", out.String(), errOut.String())
			assert.Contains(t, out.String(), " 0 failed\n")
			for r, c := range comms {
				// send: 100 float64 + guard; recv: 3 ranks' worth + guard.
				assert.Equal(t, []int{800 + guard, 3*800 + guard}, c.sizes, "rank %d: symmetric sizes, send then recv", r)
				assert.Zero(t, c.live, "rank %d: every registration released", r)
				assert.Equal(t, 2, c.released)
				if early[r] != nil {
					assert.Zero(t, early[r](), "rank %d: a buffer freed while registered", r)
				}
			}
		})
	}

	// A communicator that cannot register is a usage error, not a pass (one
	// rank: the program writes ranks' errors to stderr unsynchronized).
	code, _, errOut2 := fakeRun(t, 1, []string{"--register", "--counts", "1", "--colls", "broadcast", "--types", "int8"}, nil)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut2, "--register: this communicator cannot register buffers")
}

func TestBuildP2PCases(t *testing.T) {
	c, err := parseConfig([]string{"--counts", "0,7", "--types", "int8,float64", "--p2p", "sendrecv,gather,alltoallv", "--large", "1Mi"})
	require.NoError(t, err)
	assert.Equal(t, []p2pKind{kSendRecv, kGather, kAllToAllv}, c.p2p)
	cs, err := buildP2PCases(c, 4)
	require.NoError(t, err)
	// sendrecv and alltoallv: 2 types x 2 counts; gather also 2 roots
	// (0 and 3); then the large count once per kind, type and one root.
	require.Len(t, cs, 2*2+2*2*2+2*2+3*3)
	seeds := map[uint64]bool{}
	for _, pc := range cs {
		seeds[pc.seed] = true
	}
	assert.Len(t, seeds, len(cs), "every case has fresh inputs")
	all, err := parseConfig(nil)
	require.NoError(t, err)
	assert.Len(t, all.p2p, int(numP2PKinds), "every kind by default")

	// Every plan's blocks fit their buffers and pair up: what s sends d is
	// what d receives from s.
	for _, k := range all.p2p {
		for _, n := range []int{1, 2, 3, 8} {
			pc := pcase{kind: k, dt: collectives.Int32, count: 50, n: n, root: n - 1, seed: 7}
			plans := make([]p2pPlan, n)
			for r := range plans {
				plans[r] = planOf(pc, r)
			}
			for s := 0; s < n; s++ {
				for d := 0; d < n; d++ {
					ps, pd := plans[s], plans[d]
					assert.LessOrEqual(t, ps.sd[d]+ps.sc[d], ps.sendLen)
					assert.LessOrEqual(t, pd.rd[s]+pd.rc[s], pd.recvLen)
					want := ps.sc[d]
					if k == kSendRecv && d != (s+1)%n {
						want = 0
					}
					got := pd.rc[s]
					if k == kSendRecv && s != (d+n-1)%n {
						got = 0
					}
					assert.Equal(t, want, got, "%v n=%d %d->%d", k, n, s, d)
				}
			}
		}
	}
}

func TestP2PCasesPassAndDetectCorruption(t *testing.T) {
	args := []string{"--counts", "0,1,7,300", "--colls", "broadcast", "--types", "int8,float16,float64", "--inplace", "none"}
	code, out, errOut := fakeRun(t, 3, args, nil)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	// 6 kinds (gather and scatter at 2 roots) x 3 types x 4 counts, plus
	// the matrix's broadcasts (2 roots).
	assert.Contains(t, out, fmt.Sprintf("conformance: rank 1: %d cases, 0 failed", 8*3*4+2*3*4))

	// The 40th message received, job-wide, loses its last byte: exactly
	// one case fails, naming the block.
	code, out, _ = fakeRun(t, 3, args, func(g *checktest.Group) { g.CorruptRecv = 40 })
	require.Equal(t, 1, code, out)
	assert.Regexp(t, `FAIL \w+ .*: \[block from rank \d: 1 of \d+ elements wrong`, out)
	assert.Contains(t, out, "conformance: all 3 ranks:")
	assert.Contains(t, out, " 1 failed\n")
}

// noP2P is a communicator whose backend has no point-to-point calls: it
// refuses them before launching anything, as comm does.
type noP2P struct{ *checktest.Comm }

func (noP2P) Group(context.Context, []collectives.P2P) error {
	return fmt.Errorf("point-to-point: %w", collectives.ErrNotSupported)
}
func (noP2P) AllToAll(context.Context, uintptr, uintptr, int, collectives.DataType, uintptr) error {
	return collectives.ErrNotSupported
}

func TestP2PSkippedWhereNotSupported(t *testing.T) {
	cfg, err := parseConfig([]string{"--counts", "3", "--colls", "broadcast", "--types", "int8"})
	require.NoError(t, err)
	g := checktest.NewGroup(2)
	ranks := []bench.Rank{{Comm: noP2P{g.Rank(0)}, Space: membuf.NewHost()}, {Comm: noP2P{g.Rank(1)}, Space: membuf.NewHost()}}
	var out bytes.Buffer
	code := runRanks(context.Background(), cfg, ranks, &syncWriter{w: &out}, &bytes.Buffer{}, nil)
	assert.Equal(t, 0, code, out.String())
	assert.Contains(t, out.String(), "point-to-point calls skipped")
	assert.Contains(t, out.String(), "conformance: all 2 ranks: 8 cases, 0 failed") // the broadcasts (2 roots, 2 placements) only
}
