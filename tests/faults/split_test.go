package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/launcher"
)

// Sub-communicators across processes. A "split" child (FAULTS_CHILD=split)
// joins like a rank child, then runs FAULTS_SCENARIO:
//
//	split   Split into odd and even parent ranks (keys reversed), checked
//	        AllReduces on the child, a nested Split of the child into
//	        single ranks, checked again; prints "SPLIT rank= child= size="
//	shrink  checked AllReduces until one fails (the test kills a rank),
//	        then Shrink excluding FAULTS_EXCLUDE (comma-separated) and
//	        FAULTS_ITERS checked AllReduces on the child; prints "FAILED
//	        ...", "SHRINKING", then "SHRUNK t= rank= size=" or
//	        "SHRINKFAIL ... err="; with FAULTS_RETRY=1 a Shrink that fails
//	        naming a rank is tried once more without that rank too
//	splitshrink  Split into one child (keys the parent ranks), checked
//	        AllReduces on the child until one fails (the test kills a
//	        rank), then with FAULTS_CLOSE=parent: close the parent, Shrink
//	        the child without FAULTS_EXCLUDE; with FAULTS_CLOSE=child:
//	        Shrink the child, close the child, Shrink the parent; checked
//	        AllReduces on what Shrink made; prints "SHRUNK t= rank= size="
//	        per Shrink (of= child or parent)
//
// then "OK" and, after closing everything, "LEAK ...". FAULTS_HANG=1 makes
// the rank block where it would call Split or Shrink (prints "HANGING"),
// for the test to kill it there; the others print "INSPLIT" before Split.

func splitMain() int {
	ctx := context.Background()
	opts := comm.Options{Backend: comm.BackendHost, HeartbeatInterval: 200 * time.Millisecond}
	warmNetpoll()
	before := measure()
	c, token, err := joinJob(ctx, envInt("FAULTS_NRANKS", 0), envInt("FAULTS_RANK", 0), opts)
	if errors.Is(err, errBadID) {
		return 99
	}
	if err != nil {
		fmt.Println(report("INITFAIL", err))
		return 2
	}
	rank := c.Rank()
	fmt.Printf("READY pid=%d rank=%d\n", os.Getpid(), rank)
	var code int
	switch os.Getenv("FAULTS_SCENARIO") {
	case "split":
		code = splitScenario(ctx, c)
	case "shrink":
		code = shrinkScenario(ctx, c)
	case "splitshrink":
		code = splitShrinkScenario(ctx, c)
	default:
		fmt.Println("unknown FAULTS_SCENARIO")
		code = 99
	}
	_ = c.Close()
	fmt.Println(leakLine(before, token, rank))
	return code
}

// hang blocks for the test to kill this rank, when FAULTS_HANG=1.
func hang() {
	if os.Getenv("FAULTS_HANG") == "1" {
		fmt.Println("HANGING")
		select {}
	}
}

func splitScenario(ctx context.Context, c *comm.Comm) int {
	hang()
	fmt.Println("INSPLIT")
	child, err := c.Split(ctx, c.Rank()%2, -c.Rank(), comm.Options{})
	if err != nil {
		fmt.Println(report("SPLITFAIL", err))
		return 1
	}
	fmt.Printf("SPLIT rank=%d child=%d size=%d\n", c.Rank(), child.Rank(), child.Size())
	code := 0
	if err := checkedLoop(ctx, child, 5, 1000*(1+c.Rank()%2)); err != nil {
		fmt.Println(report("FAILED", err))
		code = 1
	}
	if code == 0 {
		one, err := child.Split(ctx, child.Rank(), 0, comm.Options{})
		if err == nil {
			err = checkedLoop(ctx, one, 2, 77)
			err = errors.Join(err, one.Close())
		}
		if err != nil {
			fmt.Println(report("FAILED", err))
			code = 1
		}
	}
	// Healthy children are closed collectively; the parent still works.
	err = child.Close()
	if err == nil {
		err = checkedLoop(ctx, c, 2, 5)
	}
	if err != nil && code == 0 {
		fmt.Println(report("FAILED", err))
		code = 1
	}
	if code == 0 {
		fmt.Println("OK")
	}
	return code
}

func shrinkScenario(ctx context.Context, c *comm.Comm) int {
	err := checkedLoop(ctx, c, 0, 0)
	fmt.Println(report("FAILED", err))
	var exclude []int
	for _, f := range strings.Split(os.Getenv("FAULTS_EXCLUDE"), ",") {
		if n, perr := strconv.Atoi(f); perr == nil {
			exclude = append(exclude, n)
		}
	}
	hang()
	fmt.Println("SHRINKING")
	var child *comm.Comm
	for attempt := 0; ; attempt++ {
		if child, err = c.Shrink(ctx, exclude, comm.Options{}); err == nil {
			break
		}
		fmt.Println(report("SHRINKFAIL", err))
		var pe *collectives.PeerError
		if os.Getenv("FAULTS_RETRY") != "1" || attempt > 0 || !errors.As(err, &pe) {
			return 1
		}
		exclude = append(exclude, pe.Rank)
	}
	fmt.Printf("SHRUNK t=%d rank=%d size=%d\n", time.Now().UnixNano(), child.Rank(), child.Size())
	err = checkedLoop(ctx, child, envInt("FAULTS_ITERS", 20), 3)
	err = errors.Join(err, child.Close())
	if err != nil {
		fmt.Println(report("FAILED", err))
		return 1
	}
	fmt.Println("OK")
	return 0
}

func splitShrinkScenario(ctx context.Context, c *comm.Comm) int {
	child, err := c.Split(ctx, 0, c.Rank(), comm.Options{})
	if err != nil {
		fmt.Println(report("SPLITFAIL", err))
		return 1
	}
	err = checkedLoop(ctx, child, 0, 0)
	fmt.Println(report("FAILED", err))
	exclude := []int{envInt("FAULTS_EXCLUDE", -1)}
	shrink := func(what string, x *comm.Comm) error {
		fmt.Println("SHRINKING of=" + what)
		s, err := x.Shrink(ctx, exclude, comm.Options{})
		if err != nil {
			return err
		}
		fmt.Printf("SHRUNK t=%d rank=%d size=%d of=%s\n", time.Now().UnixNano(), s.Rank(), s.Size(), what)
		return errors.Join(checkedLoop(ctx, s, 10, 3), s.Close())
	}
	if os.Getenv("FAULTS_CLOSE") == "parent" {
		err = errors.Join(c.Close(), shrink("child", child), child.Close())
	} else {
		err = shrink("child", child)
		err = errors.Join(err, child.Close())
		if err == nil {
			err = shrink("parent", c)
		}
	}
	if err != nil {
		fmt.Println(report("SHRINKFAIL", err))
		return 1
	}
	fmt.Println("OK")
	return 0
}

// checkedLoop runs iters AllReduces (0: until one fails, printing "ITER0"
// after the first) of random sizes, every result checked against the sum
// computed here.
func checkedLoop(ctx context.Context, c *comm.Comm, iters, base int) error {
	n, r := c.Size(), c.Rank()
	// The size sequence is shared by all ranks (a fixed seed).
	rng := rand.New(rand.NewPCG(uint64(base), uint64(n)))
	val := func(q, it, i int) int32 { return int32(base + q*7 + it%5 + i%13) }
	for it := 0; iters == 0 || it < iters; it++ {
		count := 1 + rng.IntN(70000)
		send, recv := make([]int32, count), make([]int32, count)
		for i := range send {
			send[i], recv[i] = val(r, it, i), -1
		}
		err := c.AllReduce(ctx, ptr(send), ptr(recv), count, comm.Int32, comm.Sum, 0)
		runtime.KeepAlive(send)
		if err != nil {
			return err
		}
		for i, got := range recv {
			var want int32
			for q := 0; q < n; q++ {
				want += val(q, it, i)
			}
			if got != want {
				return fmt.Errorf("BADRESULT rank %d of %d it=%d i=%d got=%d want=%d", r, n, it, i, got, want)
			}
		}
		if it == 0 && iters == 0 {
			fmt.Println("ITER0")
		}
	}
	return nil
}

// Split into odd and even ranks, and nested, across processes started by
// the launcher.
func TestSplitUnderLauncher(t *testing.T) {
	const np = 4
	var out, stderr bytes.Buffer
	res, err := launcher.Run(context.Background(), launcher.Config{
		NP: np, Program: os.Args[0], Args: []string{"-test.run=^$"}, TagOutput: true,
		// The SIGUSR1 handler of the flight recorder lives as long as the
		// process once a communicator started it: keep it out of the count.
		Env:    append(append(os.Environ(), childVar+"=split"), "FAULTS_SCENARIO=split", "GOCCL_RECORDER_SIGNAL=0"),
		Stdout: &out, Stderr: &stderr, Grace: 5 * time.Second, Timeout: 120 * time.Second,
	})
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
	assert.Equal(t, 0, res.ExitCode)
	tg := newTagged()
	tg.feed(&out)
	for r := 0; r < np; r++ {
		l := tg.expect(t, r, "SPLIT", time.Second)
		// Odd and even groups of two, keys -rank: the higher parent rank first.
		assert.Equal(t, fmt.Sprintf("SPLIT rank=%d child=%d size=2", r, 1-r/2), l)
		tg.expect(t, r, "OK", time.Second)
		assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", tg.expect(t, r, "LEAK", time.Second), "rank %d", r)
	}
}

// SIGKILL one rank of four while all loop on AllReduce: the survivors'
// calls fail naming it, they Shrink without it (whether or not it was the
// bootstrap's rank 0) and their AllReduces on the child are correct.
func TestShrinkAfterKill(t *testing.T) {
	const nranks = 4
	for _, victim := range []int{1, 0} {
		t.Run(fmt.Sprintf("victim=%d", victim), func(t *testing.T) {
			j := startSplitJob(t, nranks, []string{"FAULTS_SCENARIO=shrink", "FAULTS_EXCLUDE=" + strconv.Itoa(victim), "GOCCL_TIMEOUT=60s"}, nil)
			t0, fs := killOnceRunning(t, j, victim)
			var worstShrink time.Duration
			seen := map[string]bool{}
			for r, p := range j.ranks {
				if r == victim {
					continue
				}
				l := p.expect(t, "SHRUNK", 30*time.Second)
				worstShrink = max(worstShrink, stamp(t, l).Sub(t0))
				want := r
				if r > victim {
					want--
				}
				assert.Equal(t, strconv.Itoa(want), field(l, "rank"), "survivors numbered in parent order: %s", l)
				assert.Equal(t, "3", field(l, "size"), l)
				seen[field(l, "rank")] = true
				p.expect(t, "OK", 60*time.Second)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", p.expect(t, "LEAK", 10*time.Second), "rank %d after Close", r)
				assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
			}
			assert.Len(t, seen, 3)
			t.Logf("survivors' worst time to error %v, worst time from the kill to a working child %v", worst(fs), worstShrink)
		})
	}
}

// A rank killed while the others are in Split (it never calls it): every
// other rank's Split fails naming it, none waits for a timeout.
func TestSplitPeerKilled(t *testing.T) {
	const nranks, victim = 4, 1
	j := startSplitJob(t, nranks, []string{"FAULTS_SCENARIO=split", "GOCCL_TIMEOUT=60s"}, map[int][]string{victim: {"FAULTS_HANG=1"}})
	j.ranks[victim].expect(t, "HANGING", 30*time.Second)
	for r, p := range j.ranks {
		if r != victim {
			p.expect(t, "INSPLIT", 30*time.Second)
		}
	}
	time.Sleep(100 * time.Millisecond) // into Split's exchange
	t0 := time.Now()
	require.NoError(t, j.ranks[victim].cmd.Process.Signal(syscall.SIGKILL))
	fs := j.survivors(t, victim, "SPLITFAIL", t0, 10*time.Second)
	for _, f := range fs {
		assert.Equal(t, strconv.Itoa(victim), field(f.line, "peer"), "rank %d must name the dead rank: %s", f.rank, f.line)
		assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", j.ranks[f.rank].expect(t, "LEAK", 10*time.Second), "rank %d", f.rank)
		assert.Equal(t, 1, j.ranks[f.rank].exitCode(t, 10*time.Second))
	}
	t.Logf("worst time to error: %v", worst(fs))
}

// A second failure during the recovery: rank 0 dies, then rank 1 (the
// lowest survivor, whom the others meet) dies before it calls Shrink. The
// others' Shrink fails naming rank 1, at once; they Shrink again without
// both, and their AllReduces on the child are correct.
func TestShrinkLowestSurvivorKilled(t *testing.T) {
	const nranks = 4
	j := startSplitJob(t, nranks, []string{"FAULTS_SCENARIO=shrink", "FAULTS_EXCLUDE=0", "FAULTS_RETRY=1", "GOCCL_TIMEOUT=60s"}, map[int][]string{1: {"FAULTS_HANG=1"}})
	for _, p := range j.ranks {
		p.expect(t, "ITER0", 30*time.Second)
	}
	require.NoError(t, j.ranks[0].cmd.Process.Signal(syscall.SIGKILL))
	j.ranks[1].expect(t, "HANGING", 10*time.Second)
	for _, r := range []int{2, 3} {
		j.ranks[r].expect(t, "SHRINKING", 10*time.Second)
	}
	time.Sleep(100 * time.Millisecond) // into Shrink's rendezvous
	t0 := time.Now()
	require.NoError(t, j.ranks[1].cmd.Process.Signal(syscall.SIGKILL))
	var worstErr time.Duration
	for _, r := range []int{3, 2} {
		p := j.ranks[r]
		l := p.expect(t, "SHRINKFAIL", 10*time.Second)
		lat := stamp(t, l).Sub(t0)
		worstErr = max(worstErr, lat)
		assert.LessOrEqual(t, lat, 10*time.Second, l)
		assert.Equal(t, "1", field(l, "peer"), "rank %d must name rank 1: %s", r, l)
		l = p.expect(t, "SHRUNK", 30*time.Second)
		assert.Equal(t, strconv.Itoa(r-2), field(l, "rank"), l)
		assert.Equal(t, "2", field(l, "size"), l)
		p.expect(t, "OK", 60*time.Second)
		assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", p.expect(t, "LEAK", 10*time.Second), "rank %d", r)
		assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
	}
	t.Logf("worst time from rank 1's death to the others' Shrink error: %v", worstErr)
}

// SIGKILL one rank while the others loop on a Split child: the survivors
// Shrink the child after closing the parent, or Shrink the child, close
// it and Shrink the parent. Either communicator's Shrink goes through the
// one rescue listener each rank opened for the parent, which outlives
// whichever of the two closes first.
func TestShrinkOfSplitChildAfterKill(t *testing.T) {
	const nranks, victim = 4, 2
	for _, closeFirst := range []string{"parent", "child"} {
		t.Run("close "+closeFirst+" first", func(t *testing.T) {
			j := startSplitJob(t, nranks, []string{"FAULTS_SCENARIO=splitshrink", "FAULTS_EXCLUDE=" + strconv.Itoa(victim),
				"FAULTS_CLOSE=" + closeFirst, "GOCCL_TIMEOUT=60s"}, nil)
			killOnceRunning(t, j, victim)
			whats := []string{"child"}
			if closeFirst == "child" {
				whats = append(whats, "parent")
			}
			for r, p := range j.ranks {
				if r == victim {
					continue
				}
				want := r
				if r > victim {
					want--
				}
				for _, what := range whats {
					l := p.expect(t, "SHRUNK", 30*time.Second)
					assert.Equal(t, what, field(l, "of"), l)
					assert.Equal(t, strconv.Itoa(want), field(l, "rank"), "survivors numbered in parent order: %s", l)
					assert.Equal(t, "3", field(l, "size"), l)
				}
				p.expect(t, "OK", 60*time.Second)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", p.expect(t, "LEAK", 10*time.Second), "rank %d after Close", r)
				assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
			}
		})
	}
}

// startSplitJob starts nranks split children of one unique id.
// killOnceRunning SIGKILLs victim once every rank has run its first
// iteration and checks that each survivor's failure names it; it returns
// the moment of the kill and the survivors' failures.
func killOnceRunning(t *testing.T, j *job, victim int) (time.Time, []failure) {
	t.Helper()
	for _, p := range j.ranks {
		p.expect(t, "ITER0", 30*time.Second)
	}
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	require.NoError(t, j.ranks[victim].cmd.Process.Signal(syscall.SIGKILL))
	fs := j.survivors(t, victim, "FAILED", t0, 10*time.Second)
	for _, f := range fs {
		assert.Equal(t, strconv.Itoa(victim), field(f.line, "peer"), "rank %d must name the dead rank: %s", f.rank, f.line)
	}
	return t0, fs
}

func startSplitJob(t *testing.T, nranks int, env []string, extra map[int][]string) *job {
	t.Helper()
	return startChildren(t, "split", nranks, nil, env, extra)
}
