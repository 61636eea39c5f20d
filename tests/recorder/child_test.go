package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/onheap"
)

// childVar makes the test binary run one rank of a job instead of the
// tests. The rank reads:
//
//	REC_FAULT    skip | other | stop | kill | close: what REC_VICTIM does at call REC_AT;
//	             report: every rank prints its record's calls, statistics and
//	             metrics endpoint's busbw and link lines at the end
//	REC_VICTIM, REC_AT, REC_ITERS
//
// and makes REC_ITERS AllReduces of int32s (1024 of them), checking each
// result. At call REC_AT the victim skips it and waits (skip), calls
// AllGather instead (other), stops itself with SIGSTOP (stop), kills
// itself with SIGKILL (kill), or closes
// its communicator and exits (close). It
// prints "FAILED err=..." when a call fails, "OK" when all succeeded.
const childVar = "REC_CHILD"

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}

func rankMain() int {
	// Survivors outlive the launcher's SIGTERM long enough to print their
	// errors; the launcher's SIGKILL ends them after the grace period.
	signal.Ignore(syscall.SIGTERM)
	ctx := context.Background()
	// The default heartbeat (a peer silent for 5 s is gone) is far from
	// GOCCL_TIMEOUT: the collective's own wait names the straggler, also
	// on a loaded machine.
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println("INITFAIL err=" + err.Error())
		return 2
	}
	defer c.Close()
	fault, victim, at, iters := os.Getenv("REC_FAULT"), envInt("REC_VICTIM", -1), envInt("REC_AT", 0), envInt("REC_ITERS", 10)
	const count = 1024
	n, r := c.Size(), c.Rank()
	send, recv := make([]int32, count), make([]int32, count*n)
	ptr := onheap.Addr[int32] // keeps b on the heap: the goroutine stacks move
	fmt.Printf("READY pid=%d rank=%d\n", os.Getpid(), r)
	for it := 1; it <= iters; it++ {
		for i := range send {
			send[i] = int32(r*1000 + it*7 + i%11)
		}
		if r == victim && it == at {
			switch fault {
			case "skip":
				fmt.Println("SKIPPED")
				select {} // alive, answering heartbeats, never calling
			case "stop":
				fmt.Println("STOPPING")
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				// The stop may take hold a moment later (it does under some
				// sandboxes); it must find this rank outside the call.
				select {}
			case "kill":
				fmt.Println("KILLING")
				// The others first leave call REC_AT-1 and enter this one:
				// on a loaded machine they may still be coming out of the
				// last step this rank has passed, and a death then finds
				// them in the call before.
				time.Sleep(time.Second)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			case "close":
				err := c.Close()
				fmt.Printf("CLOSED err=%v\n", err)
				return 0
			case "other":
				err = c.AllGather(ctx, ptr(send), ptr(recv), count, comm.Int32, 0)
				runtime.KeepAlive(send)
				return failed(err)
			}
		}
		err = c.AllReduce(ctx, ptr(send), ptr(recv), count, comm.Int32, comm.Sum, 0)
		runtime.KeepAlive(send)
		if err != nil {
			return failed(err)
		}
		for i := 0; i < count; i++ {
			var want int32
			for q := 0; q < n; q++ {
				want += int32(q*1000 + it*7 + i%11)
			}
			if recv[i] != want {
				fmt.Printf("BADRESULT it=%d i=%d got=%d want=%d\n", it, i, recv[i], want)
				return 4
			}
		}
	}
	if fault == "report" {
		report(c)
	}
	fmt.Println("OK")
	return 0
}

// report prints the rank's record and statistics, and the bandwidth lines
// its metrics endpoint serves, as text the test matches.
func report(c *comm.Comm) {
	for _, k := range c.Record().Calls {
		fmt.Printf("CALL seq=%d call=%s algo=%s transport=%s state=%s\n", k.Seq, k.Call, k.Algo, k.Transport, k.State)
	}
	for _, s := range c.Stats() {
		fmt.Printf("STAT call=%s size=%d count=%d busbw=%.6f link=%g fraction=%g\n", s.Call, s.SizeClass, s.Count, s.BusBW, s.Link, s.LinkFraction)
	}
	addr := comm.MetricsAddr()
	if addr == "" {
		fmt.Println("METRIC none")
		return
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		fmt.Println("METRIC error " + err.Error())
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "goccl_busbw") || strings.HasPrefix(l, "goccl_link") {
			fmt.Println("METRIC " + l)
		}
	}
}

func failed(err error) int {
	if err == nil {
		fmt.Println("FAILED err=<nil>")
		return 3
	}
	fmt.Printf("FAILED aborted=%t mismatch=%t err=%s\n", errors.Is(err, collectives.ErrAborted),
		strings.Contains(err.Error(), "mismatched"), strings.ReplaceAll(err.Error(), "\n", " "))
	return 1
}
