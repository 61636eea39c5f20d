package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The test binary doubles as the ranks' program (and as a launcher process
// for the tests that kill it): with childEnv set, TestMain runs childMain
// instead of the tests. The first argument picks the behaviour.
const (
	childEnv   = "GOCCL_LAUNCHER_TEST_CHILD"
	childDir   = "GOCCL_LAUNCHER_TEST_DIR" // where ready files go
	longSleep  = 60 * time.Second
	testMarker = "launcher-test-child"
)

func rankFromEnv() int {
	r, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil {
		return -1
	}
	return r
}

// markReady writes <dir>/<name> holding pid, so the test knows a process
// is up (and which pid to watch).
func markReady(name string, pid int) {
	dir := os.Getenv(childDir)
	if dir == "" {
		return
	}
	tmp := filepath.Join(dir, name+".tmp")
	_ = os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o600)
	_ = os.Rename(tmp, filepath.Join(dir, name))
}

func childMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "child: no mode")
		return 99
	}
	rank := rankFromEnv()
	argInt := func(i int) int {
		n, err := strconv.Atoi(args[i])
		if err != nil {
			fmt.Fprintf(os.Stderr, "child: bad int %q\n", args[i])
			os.Exit(98)
		}
		return n
	}
	switch args[0] {
	case "launch": // a launcher process: goccl run's Main
		return Main(args[1:], os.Stdout, os.Stderr)

	case "env": // print the contract and one kept variable
		var keys []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			switch k {
			case EnvMasterAddr, EnvMasterPort, EnvRank, EnvWorldSize, EnvLocalRank,
				EnvLocalWorldSize, EnvCommID, EnvJobToken, "KEEP_ME", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID":
				keys = append(keys, kv)
			}
		}
		sort.Strings(keys)
		for _, kv := range keys {
			fmt.Println(kv)
		}
		return 0

	case "exit": // exit <rank> <code>: that rank exits code, others 0
		if rank == argInt(1) {
			return argInt(2)
		}
		return 0

	case "failsleep": // failsleep <rank> <code>: that rank fails once all are up, others sleep
		markReady("ready."+strconv.Itoa(rank), os.Getpid())
		if rank == argInt(1) {
			// Fail only once every rank is up, so that all of them are
			// stopped by the launcher, not by a race with their start.
			waitAllReady()
			return argInt(2)
		}
		time.Sleep(longSleep)
		return 0

	case "selfkill": // selfkill <rank> <signal>: that rank kills itself, others sleep
		if rank == argInt(1) {
			_ = syscall.Kill(os.Getpid(), syscall.Signal(argInt(2)))
			time.Sleep(longSleep)
		}
		time.Sleep(longSleep)
		return 0

	case "sleep": // sleep until killed
		markReady("ready."+strconv.Itoa(rank), os.Getpid())
		time.Sleep(longSleep)
		return 0

	case "ignoreterm": // ignore SIGTERM, sleep until killed
		signal.Ignore(syscall.SIGTERM)
		markReady("ready."+strconv.Itoa(rank), os.Getpid())
		time.Sleep(longSleep)
		return 0

	case "trap": // report SIGTERM/SIGINT and exit 7
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		markReady("ready."+strconv.Itoa(rank), os.Getpid())
		select {
		case s := <-ch:
			fmt.Printf("rank %d got %v\n", rank, s)
			return 7
		case <-time.After(longSleep):
			return 0
		}

	case "lines": // lines <n>: n stdout and n stderr lines, written in pieces
		n := argInt(1)
		for i := 0; i < n; i++ {
			fmt.Fprintf(os.Stdout, "out %d %d ", rank, i)
			time.Sleep(50 * time.Microsecond) // let other ranks write mid-line
			fmt.Fprintf(os.Stdout, "%s\n", strings.Repeat("x", 40+i))
			fmt.Fprintf(os.Stderr, "err %d %d\n", rank, i)
		}
		// A line longer than the reader's buffer, then one with no newline.
		fmt.Fprintf(os.Stdout, "long %d %s\n", rank, strings.Repeat("y", 200<<10))
		fmt.Fprintf(os.Stdout, "tail %d", rank)
		return 0

	case "spawn": // spawn: rank 0 starts a grandchild that sleeps; rank 1 fails once it is up
		if rank == 0 {
			cmd := exec.Command(os.Args[0], "sleep")
			cmd.Env = append(os.Environ(), EnvRank+"=grandchild")
			if err := cmd.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "spawn:", err)
				return 97
			}
			markReady("grandchild", cmd.Process.Pid)
			_ = cmd.Wait()
			return 0
		}
		for i := 0; i < 200; i++ {
			if _, err := os.Stat(filepath.Join(os.Getenv(childDir), "grandchild")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return 1
	}
	fmt.Fprintf(os.Stderr, "child: unknown mode %q\n", args[0])
	return 99
}

// waitAllReady waits (bounded) for every rank's ready file.
func waitAllReady() {
	np, _ := strconv.Atoi(os.Getenv(EnvWorldSize))
	deadline := time.Now().Add(20 * time.Second)
	for r := 0; r < np && time.Now().Before(deadline); {
		if _, err := os.Stat(filepath.Join(os.Getenv(childDir), "ready."+strconv.Itoa(r))); err == nil {
			r++
			continue
		}
		time.Sleep(5 * time.Millisecond)
	}
}
