package faults

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
)

// Scenario 6, init: ranks that disagree on nranks, share a rank number or
// speak another protocol version make init fail on every rank with an
// ErrMismatch naming them, within the bound.
func TestInitMismatch(t *testing.T) {
	t.Run("nranks", func(t *testing.T) {
		id, err := comm.NewUniqueID()
		require.NoError(t, err)
		t0 := time.Now()
		comms, errs := initRanks(context.Background(), id, 2, func(r int) comm.Options { return hostOpts() })
		_ = comms
		require.NoError(t, errs[0]) // sanity: the plain job forms
		closeAll(t, comms)

		id, err = comm.NewUniqueID()
		require.NoError(t, err)
		got := make(chan error, 2)
		go func() { _, err := comm.InitRank(context.Background(), id, 2, 0, hostOpts()); got <- err }()
		go func() { _, err := comm.InitRank(context.Background(), id, 3, 1, hostOpts()); got <- err }()
		for i := 0; i < 2; i++ {
			select {
			case err := <-got:
				require.ErrorIs(t, err, comm.ErrMismatch)
				assert.Contains(t, err.Error(), "rank 1 says nranks=3, rank 0 has 2")
			case <-time.After(10 * time.Second):
				t.Fatal("init still running 10 s after a nranks mismatch")
			}
		}
		t.Logf("both failed within %v", time.Since(t0))
	})
	t.Run("duplicate-rank-in-process", func(t *testing.T) {
		id, err := comm.NewUniqueID()
		require.NoError(t, err)
		opts := hostOpts()
		opts.Timeout = 3 * time.Second
		got := make(chan error, 3)
		for _, r := range []int{0, 1, 1} {
			go func() {
				c, err := comm.InitRank(context.Background(), id, 3, r, opts)
				if c != nil {
					_ = c.Close()
				}
				got <- err
			}()
		}
		var dup error
		for i := 0; i < 3; i++ {
			select {
			case err := <-got:
				require.Error(t, err, "a 3-rank job with ranks 0,1,1 cannot form")
				if dup == nil && err != nil && strings.Contains(err.Error(), "duplicate rank") {
					dup = err
				}
			case <-time.After(10 * time.Second):
				t.Fatal("init still running 10 s after a duplicate rank")
			}
		}
		require.NotNil(t, dup, "one rank reports the duplicate")
		require.ErrorIs(t, dup, comm.ErrMismatch)
		assert.Contains(t, dup.Error(), "rank 1")
	})
	// Raw hellos with the job's magic: a second rank 1, and a version this
	// rank 0 does not speak. Rank 0 fails naming the rank, and tells the
	// impostor (a reject frame) as well as the genuine ranks.
	for _, tc := range []struct {
		name          string
		version, rank uint32
		want          string
	}{
		{"duplicate-rank-on-the-wire", protocolVersion, 1, "rank 1 joined twice (duplicate rank)"},
		{"version", 99, 2, fmt.Sprintf("rank 2 speaks bootstrap protocol version 99, rank 0 speaks %d", protocolVersion)},
		{"rank-out-of-range", protocolVersion, 7, "rank 7 out of range: nranks=3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := comm.NewUniqueID()
			require.NoError(t, err)
			errs := make(chan error, 2)
			for _, r := range []int{0, 1} {
				go func() {
					c, err := comm.InitRank(context.Background(), id, 3, r, hostOpts())
					if c != nil {
						_ = c.Close()
					}
					errs <- err
				}()
			}
			conn := dialWhenUp(t, id.Addr().String())
			defer conn.Close()
			// Let the genuine rank 1 arrive first: a rank that reaches rank 0
			// after rank 0 gave up finds no listener and can only wait for its
			// init timeout (or for its launcher to stop it).
			time.Sleep(300 * time.Millisecond)
			_, err = conn.Write(helloBytes(id.Magic(), tc.version, 3, tc.rank, uint32(os.Getpid())))
			require.NoError(t, err)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			reply, _ := io.ReadAll(conn)
			assert.Contains(t, string(reply), tc.want, "the reject frame tells the impostor why")
			for i := 0; i < 2; i++ {
				select {
				case err := <-errs:
					require.ErrorIs(t, err, comm.ErrMismatch)
					assert.Contains(t, err.Error(), tc.want)
				case <-time.After(10 * time.Second):
					t.Fatal("init still running 10 s after the mismatch")
				}
			}
		})
	}
}

// Scenario 6, calls: with GOCCL_CHECK=1 a call whose count, datatype, op or
// root differs on one rank fails on every rank with ErrMismatch naming
// that rank, nothing is written, and the next matching call works.
func TestCheckMismatch(t *testing.T) {
	const nranks, count = 3, 64
	opts := hostOpts()
	opts.Env = map[string]string{"GOCCL_CHECK": "1"}
	comms, err := comm.InitAll(context.Background(), []int{0, 1, 2}, opts)
	require.NoError(t, err)
	defer closeAll(t, comms)
	type call func(c *comm.Comm, send, recv []int32) error
	ctx := context.Background()
	allreduce := func(n int, dt comm.DataType, op comm.Op) call {
		return func(c *comm.Comm, s, r []int32) error {
			return c.AllReduce(ctx, ptr(s), ptr(r), n, dt, op, 0)
		}
	}
	bcast := func(root int) call {
		return func(c *comm.Comm, s, r []int32) error {
			return c.Broadcast(ctx, ptr(s), ptr(r), count, comm.Int32, root, 0)
		}
	}
	cases := []struct {
		name      string
		good, odd call
		want      string
	}{
		{"count", allreduce(count, comm.Int32, comm.Sum), allreduce(count-1, comm.Int32, comm.Sum), "rank 2 called all_reduce count=63, rank 0 count=64"},
		{"dtype", allreduce(count, comm.Int32, comm.Sum), allreduce(count, comm.Float32, comm.Sum), "rank 2 called all_reduce datatype="},
		{"op", allreduce(count, comm.Int32, comm.Sum), allreduce(count, comm.Int32, comm.Max), "rank 2 called all_reduce op="},
		{"root", bcast(0), bcast(1), "rank 2 called broadcast root=1, rank 0 root=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recvs := make([][]int32, nranks)
			errs := each(comms, func(c *comm.Comm) error {
				s, r := make([]int32, count), make([]int32, count)
				for i := range s {
					s[i] = int32(c.Rank() + 1)
					r[i] = -7
				}
				recvs[c.Rank()] = r
				f := tc.good
				if c.Rank() == 2 {
					f = tc.odd
				}
				err := f(c, s, r)
				runtime.KeepAlive(s)
				return err
			})
			for r, err := range errs {
				require.ErrorIs(t, err, comm.ErrMismatch, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
				for i, v := range recvs[r] {
					require.Equal(t, int32(-7), v, "rank %d element %d written despite the mismatch", r, i)
				}
			}
			checkAllReduce(t, comms, count, 3) // the communicator is still good
		})
	}
}

// Scenario 6, world size under each launcher's variables: rank 0 told 2
// ranks, rank 1 told 3. Both inits fail at once, not at the init timeout,
// with an ErrMismatch that says so in plain words.
func TestWorldSizeMismatch(t *testing.T) {
	port := func() string {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	hexID := func() string { return hex.EncodeToString(randomBytes(16)) }
	cases := []struct {
		name string
		env  func(rank, size int) []string
	}{
		{"torchrun-master-addr", func() func(int, int) []string {
			p := port()
			return func(rank, size int) []string {
				return []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + p, fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", size)}
			}
		}()},
		{"torchelastic-file", func() func(int, int) []string {
			p, run := port(), hexID()
			return func(rank, size int) []string {
				return []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + p, "TORCHELASTIC_RUN_ID=" + run,
					fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", size),
					fmt.Sprintf("LOCAL_RANK=%d", rank), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", size)}
			}
		}()},
		{"goccl-comm-id", func() func(int, int) []string {
			p, tok := port(), hexID()
			return func(rank, size int) []string {
				return []string{"GOCCL_COMM_ID=127.0.0.1:" + p, "GOCCL_JOB_TOKEN=" + tok, fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", size)}
			}
		}()},
		{"openmpi-file", func() func(int, int) []string {
			job := hexID()
			return func(rank, size int) []string {
				return []string{"GOCCL_JOB_ID=" + job, fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", rank), fmt.Sprintf("OMPI_COMM_WORLD_SIZE=%d", size)}
			}
		}()},
	}
	var worstAll time.Duration
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			var ps []*proc
			for r, size := range []int{2, 3} {
				ps = append(ps, spawn(t, append([]string{childVar + "=rank", "FAULTS_COLL=allreduce", "FAULTS_ITERS=1", "GOCCL_TIMEOUT=60s"}, tc.env(r, size)...)...))
			}
			var took time.Duration
			for r, p := range ps {
				l := p.expect(t, "INITFAIL", 15*time.Second) // the init timeout is 60 s
				took = max(took, stamp(t, l).Sub(t0))
				assert.Equal(t, "true", field(l, "mismatch"), "rank %d: %s", r, l)
				assert.Contains(t, rest(l, "err"), "rank 1 says nranks=3, rank 0 has 2", "rank %d", r)
				assert.Equal(t, 2, p.exitCode(t, 10*time.Second))
			}
			worstAll = max(worstAll, took)
			t.Logf("both ranks failed within %v of their start", took)
		})
	}
	t.Logf("world-size mismatch: worst time to error %v (from the ranks' start)", worstAll)
}
