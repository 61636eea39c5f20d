package faults

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/host"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
)

// Child modes. A rank child reads its job from the environment:
//
//	FAULTS_ID        unique id (hex); empty: InitFromEnv (launcher jobs)
//	FAULTS_NRANKS, FAULTS_RANK
//	FAULTS_COLL      allreduce | allgather | reducescatter
//	FAULTS_COUNT     elements per call (per rank for allgather/reducescatter)
//	FAULTS_ITERS     calls to make; 0: until one fails
//	FAULTS_ITERS_<r> the same for rank r only (a rank that makes fewer calls)
//	FAULTS_ODD_<r>   "it:how": at iteration it rank r's call goes wrong, how
//	                 is skip (no call), zero (count 0) or invalid (a nil
//	                 send buffer); the rank ignores that call's error and
//	                 result and carries on, as a careless program would
//	FAULTS_VALUE     base of the values, distinct per job
//	FAULTS_NOCHECK   1: do not check results (a program that would not notice)
//	FAULTS_HB        heartbeat interval (Options.HeartbeatInterval)
//	FAULTS_INJECT    a fault this rank injects into itself (see injector)
//	FAULTS_TERM      "catch": keep running on SIGTERM (to observe survivors
//	                 under the launcher)
//
// and prints, one per line: "READY pid= rank=", then "OK" after FAULTS_ITERS
// calls, "CLOSING t=" as it calls Close and "CLOSED" once Close returned, or "FAILED t= peer= aborted= timeout= err=" when a call fails,
// or "INITFAIL t= peer= ... err=" when init fails, followed by "LEAK ..."
// with the resources held beyond what the process held before init.
func childMain(mode string) int {
	switch mode {
	case "rank":
		return rankMain()
	case "foreign":
		return foreignMain()
	case "rlimit":
		return rlimitMain()
	case "hello":
		return helloMain()
	case "split":
		return splitMain()
	}
	fmt.Println("unknown child mode", mode)
	return 99
}

func envInt(k string, def int) int {
	if v := os.Getenv(k); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	return def
}

// report describes a failure on one line.
func report(kind string, err error) string {
	pe := -1
	var p *collectives.PeerError
	if errors.As(err, &p) {
		pe = p.Rank
	}
	return fmt.Sprintf("%s t=%d peer=%d aborted=%t timeout=%t mismatch=%t callmismatch=%t peerclosed=%t err=%s", kind, time.Now().UnixNano(), pe,
		errors.Is(err, collectives.ErrAborted), errors.Is(err, collectives.ErrTimeout), errors.Is(err, comm.ErrMismatch),
		errors.Is(err, comm.ErrCallMismatch), errors.Is(err, comm.ErrPeerClosed),
		strings.ReplaceAll(err.Error(), "\n", " "))
}

// warmNetpoll makes the runtime create its poller descriptors now, so
// that they are not counted as goccl's.
func warmNetpoll() {
	if l, err := net.Listen("tcp4", "127.0.0.1:0"); err == nil {
		_ = l.Close()
	}
}

// usage is what a process holds that goccl must give back.
type usage struct{ fds, maps, goroutines int }

func measure() usage {
	return usage{fds: countFDs(), maps: countShmMaps(), goroutines: runtime.NumGoroutine()}
}

// leakLine compares now against before, waiting a little for goroutines
// that are on their way out.
func leakLine(before usage, token string, rank int) string {
	var now usage
	for i := 0; i < 100; i++ {
		now = measure()
		if now.goroutines <= before.goroutines && now.fds <= before.fds {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("LEAK fds=%d maps=%d goroutines=%d socks=%d", now.fds-before.fds, now.maps-before.maps,
		now.goroutines-before.goroutines, len(abstractSockets(fmt.Sprintf("goccl-%s-%d", token, rank))))
}

// errBadID is joinJob's error for a FAULTS_ID that does not parse.
var errBadID = errors.New("bad FAULTS_ID")

// joinJob makes this child's communicator: rank of nranks in the job
// FAULTS_ID names, or else the job the launcher's environment describes.
// token is the job's, which names its sockets for the leak count.
func joinJob(ctx context.Context, nranks, rank int, opts comm.Options) (*comm.Comm, string, error) {
	s := os.Getenv("FAULTS_ID")
	if s == "" {
		c, err := comm.InitFromEnv(ctx, opts)
		return c, os.Getenv("GOCCL_JOB_TOKEN"), err
	}
	id, err := comm.ParseUniqueID(s)
	if err != nil {
		fmt.Println("bad FAULTS_ID:", err)
		return nil, "", errBadID
	}
	c, err := comm.InitRank(ctx, id, nranks, rank, opts)
	return c, id.Token(), err
}

func rankMain() int {
	if os.Getenv("FAULTS_TERM") == "catch" {
		signal.Ignore(syscall.SIGTERM)
	}
	ctx := context.Background()
	nranks, rank := envInt("FAULTS_NRANKS", 0), envInt("FAULTS_RANK", envInt("RANK", 0))
	opts := comm.Options{Backend: comm.BackendHost}
	if hb := os.Getenv("FAULTS_HB"); hb != "" {
		d, err := time.ParseDuration(hb)
		if err != nil {
			fmt.Println("bad FAULTS_HB:", err)
			return 99
		}
		opts.HeartbeatInterval = d
	}
	inj := injector(os.Getenv("FAULTS_INJECT"))
	if inj == "before-init" {
		fmt.Printf("READY pid=%d rank=%d\n", os.Getpid(), rank)
		select {} // killed by the test before it ever connects
	}
	if inj != "" {
		opts.NewBackend = inj.factory
	}
	warmNetpoll()
	before := measure()
	c, token, err := joinJob(ctx, nranks, rank, opts)
	if errors.Is(err, errBadID) {
		return 99
	}
	if err != nil {
		fmt.Println(report("INITFAIL", err))
		fmt.Println(leakLine(before, token, rank))
		return 2
	}
	rank = c.Rank()
	fmt.Printf("READY pid=%d rank=%d\n", os.Getpid(), rank)
	code := loop(ctx, c)
	if code == 0 {
		fmt.Printf("CLOSING t=%d\n", time.Now().UnixNano())
	}
	_ = c.Close()
	if code == 0 {
		fmt.Println("CLOSED")
	}
	if code == 1 {
		fmt.Println(leakLine(before, token, rank))
	}
	return code
}

// loop runs the collective FAULTS_ITERS times (0: until it fails),
// checking every result against the sums computed here.
func loop(ctx context.Context, c *comm.Comm) int {
	coll := os.Getenv("FAULTS_COLL")
	count := envInt("FAULTS_COUNT", 1024)
	n, r := c.Size(), c.Rank()
	iters := envInt("FAULTS_ITERS_"+strconv.Itoa(r), envInt("FAULTS_ITERS", 0))
	base := int32(envInt("FAULTS_VALUE", 0))
	// Rank q contributes val(q, it, i) at element i of its send buffer.
	val := func(q, it, i int) int32 { return base + int32(q*7+it%5+i%13) }
	var send, recv []int32
	switch coll {
	case "allgather":
		send, recv = make([]int32, count), make([]int32, count*n)
	case "reducescatter", "alltoall":
		send, recv = make([]int32, count*n), make([]int32, count)
		if coll == "alltoall" {
			recv = make([]int32, count*n)
		}
	default:
		send, recv = make([]int32, count), make([]int32, count)
	}
	g := comm.NewGroup()
	noCheck := os.Getenv("FAULTS_NOCHECK") == "1"
	oddIt, oddHow := -1, ""
	if v := os.Getenv("FAULTS_ODD_" + strconv.Itoa(r)); v != "" {
		a, b, _ := strings.Cut(v, ":")
		oddIt, _ = strconv.Atoi(a)
		oddHow = b
	}
	for it := 0; iters == 0 || it < iters; it++ {
		for i := range send {
			send[i] = val(r, it, i)
		}
		cnt, sp := count, ptr(send)
		if it == oddIt {
			switch oddHow {
			case "skip":
				fmt.Printf("ODD t=%d it=%d how=skip\n", time.Now().UnixNano(), it)
				continue
			case "zero":
				cnt = 0
			case "invalid":
				sp = 0
			}
		}
		var err error
		switch coll {
		case "allgather":
			err = c.AllGather(ctx, sp, ptr(recv), cnt, comm.Int32, 0)
		case "reducescatter":
			err = c.ReduceScatter(ctx, sp, ptr(recv), cnt, comm.Int32, comm.Sum, 0)
		case "sendrecv":
			// A ring exchange in one group, Recv recorded first.
			_ = g.Recv(c, ptr(recv), cnt, comm.Int32, (r+n-1)%n, 0)
			_ = g.Send(c, sp, cnt, comm.Int32, (r+1)%n, 0)
			err = g.Run(ctx)
		case "alltoall":
			err = c.AllToAll(ctx, sp, ptr(recv), cnt, comm.Int32, 0)
		default:
			err = c.AllReduce(ctx, sp, ptr(recv), cnt, comm.Int32, comm.Sum, 0)
		}
		runtime.KeepAlive(send)
		if it == oddIt {
			fmt.Printf("ODD t=%d it=%d how=%s err=%v\n", time.Now().UnixNano(), it, oddHow, err)
			continue
		}
		if err != nil {
			fmt.Println(report("FAILED", err))
			return 1
		}
		for i, got := range recv {
			if noCheck {
				break
			}
			var want int32
			switch coll {
			case "allgather":
				want = val(i/count, it, i%count)
			case "reducescatter":
				for q := 0; q < n; q++ {
					want += val(q, it, r*count+i)
				}
			case "sendrecv":
				want = val((r+n-1)%n, it, i)
			case "alltoall":
				want = val(i/count, it, r*count+i%count)
			default:
				for q := 0; q < n; q++ {
					want += val(q, it, i)
				}
			}
			if got != want {
				fmt.Printf("BADRESULT it=%d i=%d got=%d want=%d\n", it, i, got, want)
				return 4
			}
		}
		if it == 0 {
			fmt.Println("ITER0")
		}
	}
	fmt.Println("OK")
	return 0
}

// injector is a fault a rank injects into itself during init, by wrapping
// the bootstrap the host backend is built on:
//
//	after-allgather: SIGKILL self once the backend's first AllGather
//	                 (its configuration agreement) has completed
//	in-sendfds:      SIGKILL self after passing the segment to one peer
//	before-init:     never call init (the test kills the process)
type injector string

func (inj injector) factory(ctx context.Context, b transport.Bootstrap, cfg comm.BackendConfig) (collectives.Backend, error) {
	return host.New(ctx, &killingBootstrap{Bootstrap: b, inj: inj}, host.Config{Algo: cfg.Algo, Logger: cfg.Logger})
}

type killingBootstrap struct {
	transport.Bootstrap
	inj   injector
	sends int
}

func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func (k *killingBootstrap) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	out, err := k.Bootstrap.AllGather(ctx, data)
	if k.inj == "after-allgather" {
		die()
	}
	return out, err
}

func (k *killingBootstrap) SendFDs(ctx context.Context, peer int, fds []int) error {
	if k.inj == "in-sendfds" && k.sends == 1 {
		die()
	}
	k.sends++
	return k.Bootstrap.SendFDs(ctx, peer, fds)
}

// foreignMain sends one datagram with descriptors to a rank's fd socket,
// as a process outside the job would. FAULTS_SOCK names the socket,
// FAULTS_PAYLOAD the payload (hex), FAULTS_NFDS how many memfds to attach,
// FAULTS_REPEAT how many times to send it (1), FAULTS_UID a uid to become
// first (as root: another user's process).
func foreignMain() int {
	if u := envInt("FAULTS_UID", -1); u >= 0 {
		if err := syscall.Setuid(u); err != nil {
			fmt.Println("setuid:", err)
			return 1
		}
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		fmt.Println("socket:", err)
		return 1
	}
	var fds []int
	for i := 0; i < envInt("FAULTS_NFDS", 1); i++ {
		fd, err := unix.MemfdCreate("forged", unix.MFD_CLOEXEC)
		if err != nil {
			fmt.Println("memfd:", err)
			return 1
		}
		fds = append(fds, fd)
	}
	payload, err := hex.DecodeString(os.Getenv("FAULTS_PAYLOAD"))
	if err != nil {
		fmt.Println("FAULTS_PAYLOAD:", err)
		return 1
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for i := 0; i < envInt("FAULTS_REPEAT", 1); i++ {
		if err := unix.Sendmsg(s, payload, oob, &unix.SockaddrUnix{Name: os.Getenv("FAULTS_SOCK")}, 0); err != nil {
			fmt.Println("sendmsg:", err)
			return 1
		}
	}
	fmt.Println("SENT")
	return 0
}

// fdPayload builds the fd socket's message header ("GFD1", magic, sender,
// count; comm/fdsock.go) as a forger who knows the job's magic would.
func fdPayload(magic uint64, sender, nfds uint32) string {
	b := make([]byte, 20)
	copy(b, "GFD1")
	binary.BigEndian.PutUint64(b[4:], magic)
	binary.BigEndian.PutUint32(b[12:], sender)
	binary.BigEndian.PutUint32(b[16:], nfds)
	return string(b)
}

// rlimitMain lowers RLIMIT_NOFILE to the descriptors open now plus
// FAULTS_SPARE, then makes a 2-rank host communicator in this process and
// runs one AllReduce. It prints "RESULT ok" or "RESULT err=...", then
// "LEAK ..." (descriptors are compared with the count before init).
func rlimitMain() int {
	spare := envInt("FAULTS_SPARE", 0)
	ctx := context.Background()
	warmNetpoll()
	before := measure()
	lim := unix.Rlimit{Cur: uint64(before.fds + spare), Max: uint64(before.fds + spare + 64)}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("setrlimit:", err)
		return 99
	}
	opts := comm.Options{Backend: comm.BackendHost, Timeout: 5 * time.Second}
	comms, err := comm.InitAll(ctx, []int{0, 1}, opts)
	if err == nil {
		errs := make(chan error, 2)
		for _, c := range comms {
			go func(c *comm.Comm) {
				b := make([]int32, 16)
				p := ptr(b)
				errs <- c.AllReduce(ctx, p, p, len(b), comm.Int32, comm.Sum, 0)
				runtime.KeepAlive(b)
			}(c)
		}
		err = errors.Join(<-errs, <-errs)
		for _, c := range comms {
			err = errors.Join(err, c.Close())
		}
	}
	if err != nil {
		fmt.Println("RESULT " + report("err", err))
	} else {
		fmt.Println("RESULT ok")
	}
	fmt.Println(leakLine(before, "none", 0))
	return 0
}

// helloMain opens one connection per hello in FAULTS_HELLOS (hex, comma
// separated) to FAULTS_ADDR, sends it and prints "REPLY <text>" with what
// came back before the connection closed, as a process outside the job
// that knows its magic would; FAULTS_UID: a uid to become first.
func helloMain() int {
	if u := envInt("FAULTS_UID", -1); u >= 0 {
		if err := syscall.Setuid(u); err != nil {
			fmt.Println("setuid:", err)
			return 1
		}
	}
	for _, h := range strings.Split(os.Getenv("FAULTS_HELLOS"), ",") {
		b, err := hex.DecodeString(h)
		if err != nil {
			fmt.Println("FAULTS_HELLOS:", err)
			return 1
		}
		conn, err := net.Dial("tcp", os.Getenv("FAULTS_ADDR"))
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		_, _ = conn.Write(b)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, _ := io.ReadAll(conn)
		_ = conn.Close()
		fmt.Printf("REPLY %q\n", reply)
	}
	return 0
}
