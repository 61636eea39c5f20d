package comm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

type result struct {
	c   *Comm
	err error
}

// goInit starts InitRank in a goroutine.
func goInit(id UniqueID, nranks, rank int, opts Options) chan result {
	ch := make(chan result, 1)
	go func() {
		c, err := InitRank(context.Background(), id, nranks, rank, opts)
		ch <- result{c, err}
	}()
	return ch
}

// arrivals gives rank 0's options a logger that reports each rank rank 0
// has taken in (its "rank arrived" line): the tests wait for it rather
// than sleep, which a loaded machine outlasts.
func arrivals(opts Options) (Options, <-chan int) {
	ch := make(chan int, 64)
	opts.Logger = slog.New(arrivalHandler{ch})
	return opts, ch
}

type arrivalHandler struct{ ch chan int }

func (arrivalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h arrivalHandler) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h arrivalHandler) WithGroup(string) slog.Handler          { return h }
func (h arrivalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "goccl: rank arrived" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "rank" {
			select {
			case h.ch <- int(a.Value.Int64()):
			default:
			}
			return false
		}
		return true
	})
	return nil
}

// arrived waits for rank 0 to take in rank.
func arrived(t *testing.T, ch <-chan int, rank int) {
	t.Helper()
	for {
		select {
		case r := <-ch:
			if r == rank {
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("rank 0 did not take in rank %d within 20 s", rank)
		}
	}
}

func (r result) close() {
	if r.c != nil {
		_ = r.c.Close()
	}
}

func newID(t *testing.T) UniqueID {
	id, err := NewUniqueID()
	require.NoError(t, err)
	return id
}

// dialWhenUp connects to rank 0's port once it listens.
func dialWhenUp(t *testing.T, id UniqueID) net.Conn {
	t.Helper()
	var conn net.Conn
	waitFor(t, 5*time.Second, func() bool {
		var err error
		conn, err = net.Dial("tcp", id.Addr().String())
		return err == nil
	}, "rank 0 to listen")
	return conn
}

// rawJoin sends a hand-made hello and returns rank 0's reject as the error
// the rank would report.
func rawJoin(t *testing.T, id UniqueID, h hello) error {
	conn := dialWhenUp(t, id)
	defer conn.Close()
	b := encodeHello(h)
	_, err := conn.Write(b[:])
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, frameHeaderSize)
	for {
		fh, payload, err := readFrame(conn, hdr)
		require.NoError(t, err)
		if fh.Kind == kindReject {
			return rejection(payload)
		}
	}
}

func TestRendezvousMismatches(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	opts.Timeout = 5 * time.Second
	pid := uint32(os.Getpid())
	cases := []struct {
		name   string
		nranks int
		h      func(magic uint64) hello
		want   string
	}{
		{"wrong version", 2, func(m uint64) hello { return hello{m, protocolVersion + 1, 2, 1, pid} }, fmt.Sprintf("rank 1 speaks bootstrap protocol version %d, rank 0 speaks %d", protocolVersion+1, protocolVersion)},
		{"mismatched nranks", 2, func(m uint64) hello { return hello{m, protocolVersion, 4, 3, pid} }, "rank 3 says nranks=4, rank 0 has 2"},
		{"rank out of range", 3, func(m uint64) hello { return hello{m, protocolVersion, 3, 5, pid} }, "rank 5 out of range: nranks=3"},
		{"claims rank 0", 2, func(m uint64) hello { return hello{m, protocolVersion, 2, 0, pid} }, "rank 0 joined twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := newID(t)
			root := goInit(id, c.nranks, 0, opts)
			peerErr := rawJoin(t, id, c.h(id.Magic()))
			r := <-root
			defer r.close()
			require.ErrorIs(t, r.err, ErrMismatch)
			require.ErrorIs(t, r.err, collectives.ErrInvalidArgument)
			assert.Contains(t, r.err.Error(), c.want)
			require.ErrorIs(t, peerErr, ErrMismatch)
			assert.Equal(t, "goccl: rank 0: "+peerErr.Error(), r.err.Error(), "the bad peer fails with rank 0's message")
		})
	}
}

func TestRendezvousNRanksMismatchBothSides(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	id := newID(t)
	root := goInit(id, 2, 0, opts)
	leaf := goInit(id, 4, 3, opts)
	r, l := <-root, <-leaf
	defer r.close()
	defer l.close()
	require.ErrorIs(t, r.err, ErrMismatch)
	require.ErrorIs(t, l.err, ErrMismatch)
	assert.Contains(t, r.err.Error(), "rank 3 says nranks=4, rank 0 has 2")
	assert.Equal(t, withoutRank(r.err), withoutRank(l.err))
	assert.Equal(t, "goccl: rank 3: ", strings.TrimSuffix(l.err.Error(), withoutRank(l.err)), "each rank says it is the one reporting")
}

// withoutRank is an error's text without the "goccl: rank N: " of the
// rank that returned it.
func withoutRank(err error) string {
	return regexp.MustCompile(`^goccl: rank [0-9]+: `).ReplaceAllString(err.Error(), "")
}

func TestRendezvousDuplicateRank(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	id := newID(t)
	rootOpts, in := arrivals(opts)
	root := goInit(id, 3, 0, rootOpts)
	a := goInit(id, 3, 1, opts)
	arrived(t, in, 1)
	// The same rank again reaches rank 0 (fd sockets are bound only once
	// the job formed), which fails the job; the duplicate hears why too.
	_, dupErr := InitRank(context.Background(), id, 3, 1, opts)
	require.ErrorIs(t, dupErr, ErrMismatch)
	assert.Contains(t, dupErr.Error(), "rank 1 joined twice (duplicate rank)")
	rs := []result{<-root, <-a}
	for i, r := range rs {
		defer r.close()
		require.ErrorIs(t, r.err, ErrMismatch, "caller %d", i)
		assert.Contains(t, r.err.Error(), "rank 1 joined twice")
		assert.Equal(t, withoutRank(r.err), withoutRank(dupErr))
	}
}

// A rank that joins and then vanishes before the job forms is named,
// as a *PeerError, by every rank, not only by rank 0 which saw it go.
func TestRendezvousLostRankNamedEverywhere(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	opts.Timeout = 10 * time.Second
	id := newID(t)
	// Rank 3 never comes, so the job cannot form before rank 2 leaves.
	rootOpts, in := arrivals(opts)
	root := goInit(id, 4, 0, rootOpts)
	leaf := goInit(id, 4, 1, opts)
	arrived(t, in, 1)
	conn := dialWhenUp(t, id)
	b := encodeHello(hello{id.Magic(), protocolVersion, 4, 2, uint32(os.Getpid())})
	_, err := conn.Write(b[:])
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, _, err := readFrame(conn, make([]byte, frameHeaderSize))
	require.NoError(t, err)
	require.Equal(t, uint8(kindHeartbeat), fh.Kind, "rank 0 acknowledged rank 2")
	require.NoError(t, conn.Close()) // rank 2 dies before the job forms
	for i, r := range []result{<-root, <-leaf} {
		defer r.close()
		var pe *collectives.PeerError
		require.ErrorAsf(t, r.err, &pe, "rank %d: %v", i, r.err)
		assert.Equalf(t, 2, pe.Rank, "rank %d names the lost rank", i)
		assert.Contains(t, r.err.Error(), "disconnected before the job formed")
	}
}

func TestRendezvousRootAbsent(t *testing.T) {
	// A port that nobody listens on: reserve and release it.
	id := newID(t)
	opts := testOpts(&fakeFactory{})
	opts.Timeout = 700 * time.Millisecond
	start := time.Now()
	_, err := InitRank(context.Background(), id, 2, 1, opts)
	took := time.Since(start)
	require.ErrorIs(t, err, collectives.ErrTimeout)
	assert.Contains(t, err.Error(), "goccl: rank 1: timed out waiting for peer: rank 0 at "+id.Addr().String()+" not reached")
	assert.Less(t, took, 10*time.Second, "the timeout ends the retries")

	// A caller's context shorter than the timeout wins.
	opts.Timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = InitRank(ctx, id, 2, 1, opts)
	require.ErrorIs(t, err, collectives.ErrTimeout)
	assert.Less(t, time.Since(start), 10*time.Second, "the context, not the minute")
}

func TestRendezvousMissingRankTimesOut(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	opts.Timeout = 800 * time.Millisecond
	id := newID(t)
	root := goInit(id, 3, 0, opts)
	patient := opts
	patient.Timeout = 5 * time.Second
	leaf := goInit(id, 3, 1, patient)
	r, l := <-root, <-leaf
	require.ErrorIs(t, r.err, collectives.ErrTimeout)
	assert.Contains(t, r.err.Error(), "ranks 2 did not join")
	require.ErrorIs(t, l.err, collectives.ErrTimeout)
	assert.Equal(t, withoutRank(r.err), withoutRank(l.err), "the waiting rank hears rank 0's reason")
}

// A rank of another job (other magic, same address) is dropped like any
// stranger; the job forms and the stranger rank times out.
func TestRendezvousWrongMagicDropped(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	id := newID(t)
	other, err := NewUniqueIDAt(id.Addr())
	require.NoError(t, err)
	root := goInit(id, 2, 0, opts)
	short := opts
	short.Timeout = 2 * time.Second
	stray := goInit(other, 2, 1, short)
	time.Sleep(300 * time.Millisecond)
	leaf := goInit(id, 2, 1, opts)
	r, l := <-root, <-leaf
	defer r.close()
	defer l.close()
	require.NoError(t, r.err)
	require.NoError(t, l.err)
	s := <-stray
	require.ErrorIs(t, s.err, collectives.ErrTimeout)
}

// Strangers on the bootstrap port while the job forms: each is dropped
// by its hello timeout (800 ms) and the job still forms.
func TestRendezvousStrangers(t *testing.T) {
	opts := testOpts(&fakeFactory{})
	id := newID(t)
	root := goInit(id, 3, 0, opts)
	junk := make([]byte, 200)
	_, _ = rand.Read(junk)
	huge := []byte{0xff, 0xff, 0xff, 0xff, kindContrib, 0, 0, 0, 0, 0, 0, 1}
	wrongMagic := encodeHello(hello{id.Magic() ^ 1, protocolVersion, 3, 1, 1})
	strangers := map[string][]byte{
		"garbage":     junk,
		"silent":      nil,
		"2^32 length": append(huge, huge...),
		"http":        []byte("GET / HTTP/1.0\r\n\r\n"),
		"truncated":   wrongMagic[:10],
		"wrong magic": wrongMagic[:],
	}
	type dropped struct {
		name string
		took time.Duration
		err  error
	}
	out := make(chan dropped, len(strangers))
	for name, b := range strangers {
		conn := dialWhenUp(t, id)
		go func() {
			defer conn.Close()
			start := time.Now()
			if len(b) > 0 {
				_, _ = conn.Write(b)
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.ReadAll(conn)
			out <- dropped{name, time.Since(start), err}
		}()
	}
	// Every stranger is dropped before any rank joins: by its hello
	// timeout, not by the job forming.
	for range strangers {
		d := <-out
		if d.err != nil { // unread bytes turn the close into a reset
			require.ErrorIs(t, d.err, syscall.ECONNRESET, "%s: rank 0 closed the connection, no timeout", d.name)
		}
		assert.Less(t, d.took, 10*time.Second, d.name)
	}
	a := goInit(id, 3, 1, opts)
	b := goInit(id, 3, 2, opts)
	rs := []result{<-root, <-a, <-b}
	for i, r := range rs {
		defer r.close()
		require.NoError(t, r.err, "rank %d", i)
	}
	// The job works.
	errs := eachRank([]*Comm{rs[0].c, rs[1].c, rs[2].c}, func(c *Comm) error { return c.Bootstrap().Barrier(context.Background()) })
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func TestInitFromEnvFileRendezvous(t *testing.T) {
	ns := "test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const n = 3
	errs := make(chan result, n)
	for r := 0; r < n; r++ {
		go func(r int) {
			opts := testOpts(&fakeFactory{})
			opts.Env = map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": strconv.Itoa(n),
				"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r), "PMIX_NAMESPACE": ns}
			c, err := InitFromEnv(context.Background(), opts)
			errs <- result{c, err}
		}(r)
	}
	var comms []*Comm
	for i := 0; i < n; i++ {
		r := <-errs
		require.NoError(t, r.err)
		defer r.close()
		comms = append(comms, r.c)
	}
	_, err := os.Stat(rendezvousPath("PMIX_NAMESPACE=" + ns))
	assert.True(t, errors.Is(err, os.ErrNotExist), "rank 0 removed the address file once the job formed")
	for _, err := range eachRank(comms, func(c *Comm) error { return c.Bootstrap().Barrier(context.Background()) }) {
		require.NoError(t, err)
	}
}

func TestInitFromEnvAddress(t *testing.T) {
	id := newID(t)
	const n = 2
	errs := make(chan result, n)
	for r := 0; r < n; r++ {
		go func(r int) {
			opts := testOpts(&fakeFactory{})
			opts.Env = map[string]string{"GOCCL_COMM_ID": id.Addr().String(), "RANK": strconv.Itoa(r), "WORLD_SIZE": "2",
				"LOCAL_RANK": strconv.Itoa(r), "GOCCL_JOB_TOKEN": "00112233445566778899aabbccddeeff"}
			c, err := InitFromEnv(context.Background(), opts)
			errs <- result{c, err}
		}(r)
	}
	for i := 0; i < n; i++ {
		r := <-errs
		require.NoError(t, r.err)
		defer r.close()
		assert.Equal(t, r.c.Rank(), r.c.LocalRank())
	}
}

func TestInitRankArgumentErrors(t *testing.T) {
	id := newID(t)
	opts := testOpts(&fakeFactory{})
	for _, c := range []struct {
		nranks, rank int
		want         string
	}{{0, 0, "nranks=0"}, {2, 2, "rank=2 not in [0,2)"}, {2, -1, "rank=-1"}} {
		_, err := InitRank(context.Background(), id, c.nranks, c.rank, opts)
		require.ErrorIs(t, err, collectives.ErrInvalidArgument)
		assert.Contains(t, err.Error(), c.want)
	}
	_, err := InitRank(context.Background(), UniqueID{}, 2, 0, opts)
	require.ErrorIs(t, err, ErrBadUniqueID)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	_, err = InitAll(context.Background(), nil, opts)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	_ = netip.AddrPort{}
}
