package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Large calls between ranks of one machine can skip the staging: a rank
// copies straight out of a peer's buffer, one copy where staging costs
// two (cma_algos.go). Ranks of one process read each other in place.
// Ranks of different processes read through Linux's cross-memory attach
// (process_vm_readv), whose permission is ptrace's (same user; under
// Yama's ptrace_scope 1 only a process the target named), so every rank
// tries it at initialization, reading each peer's probe word and its own,
// and the ranks use it only if every one succeeded; otherwise every call
// takes the staging path, and a DEBUG line says why. The kernel pins and
// copies the peer's pages one by one, which on 4 KiB pages has measured
// slower than staging (docs/perf.md): between processes it is used only
// when asked.

const (
	// offCMA is where a rank publishes its call's send and receive
	// addresses, a cache line of its own in its control words.
	offCMA = 832

	defaultCMAMin = 1 << 20
	// cmaBounce is the L2-sized room a rank reads its peers' parts into
	// before reducing them, split over the ranks.
	cmaBounce = 512 << 10
	// cmaPiece bounds one system call's copy, so that aborts are seen
	// between.
	cmaPiece = 4 << 20
)

// cma is one rank's single-copy state, nil when it is off.
type cma struct {
	min    int    // calls of at least this many bytes (count × element size) go single-copy
	pids   []int  // every rank's process
	direct []bool // direct[q]: rank q shares this process; its buffers are read in place
	chunk  int    // bytes of each rank's bounce part
	bounce [][]byte
	send   []uintptr // every rank's send address of the current call
	recv   []uintptr
	words  [][]uint64 // words[q]: rank q's published addresses (send, recv)
	liov   [1]unix.Iovec
	riov   [1]unix.RemoteIovec
}

// Modes of the single-copy path, as cmaSettings reads them.
const (
	cmaBad  = -2 // a setting this rank could not read
	cmaOff  = -1 // never
	cmaAuto = 0  // between ranks of one process only
	cmaOn   = 1  // between processes too, through process_vm_readv
)

// cmaSettings reads the mode and the threshold: Config.CMAMin when set
// (negative: off; positive: on, from that size), else GOCCL_HOST_CMA (1:
// on) and GOCCL_HOST_CMA_MIN (a size such as 1M), from Config.Env.
// GOCCL_HOST_CMA=0 turns it off whatever the configuration says: it is
// the way out when the path misbehaves.
func cmaSettings(cfg Config) (mode, min int, err error) {
	mode, min = cmaAuto, defaultCMAMin
	if v := strings.TrimSpace(cfg.getenv("GOCCL_HOST_CMA")); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return cmaBad, 0, fmt.Errorf("%w: GOCCL_HOST_CMA=%q (want 0 or 1)", collectives.ErrInvalidArgument, v)
		}
		mode = cmaOff
		if on {
			mode = cmaOn
		}
	}
	if v := cfg.getenv("GOCCL_HOST_CMA_MIN"); v != "" {
		n, err := parseBytes(v)
		if err != nil || n <= 0 {
			return cmaBad, 0, fmt.Errorf("%w: GOCCL_HOST_CMA_MIN=%q (want a positive size such as 1M)", collectives.ErrInvalidArgument, v)
		}
		min = n
	}
	switch {
	case mode == cmaOff || cfg.CMAMin < 0:
		mode = cmaOff
	case cfg.CMAMin > 0:
		mode, min = cmaOn, cfg.CMAMin
	}
	return mode, min, nil
}

// parseBytes reads a byte count with an optional K, M or G suffix.
func parseBytes(s string) (int, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	mul := 1
	for suf, m := range map[string]int{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			s, mul = strings.TrimSuffix(s, suf), m
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	return n * mul, nil
}

// cmaDirectOff makes ranks of one process read each other through the
// system call too, as ranks of different processes do (tests).
var cmaDirectOff bool

// cmaSetup decides, with every rank, whether calls of this job may copy
// straight between the ranks' buffers, and from which size. It is
// collective: two bootstrap AllGathers, one of the settings and probe
// words, one of the probes' outcomes. Ranks with different thresholds fail
// together; a rank with it turned off turns it off for all, one that turns
// it on (and every rank's probe succeeding) turns it on for all.
func cmaSetup(ctx context.Context, b transport.Bootstrap, cfg Config) (*cma, error) {
	rank, n := b.Rank(), b.Size()
	mode, min, serr := cmaSettings(cfg)
	allowPeers()
	// The probe word lives in a page of its own, outside Go's heap and
	// stacks, so that it stays where the peers were told it is.
	page, err := unix.Mmap(-1, 0, pageBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("cross-memory attach probe: %w", err)
	}
	defer func() { _ = unix.Munmap(page) }()
	probe := as[uint64](page)
	probe[0] = rand.Uint64() | 1
	le := binary.LittleEndian
	mine := le.AppendUint64(nil, uint64(int64(mode)))
	mine = le.AppendUint64(mine, uint64(min))
	mine = le.AppendUint64(mine, uint64(os.Getpid()))
	mine = le.AppendUint64(mine, uint64(uintptr(unsafe.Pointer(&probe[0]))))
	mine = le.AppendUint64(mine, probe[0])
	all, err := b.AllGather(ctx, mine)
	if serr != nil {
		return nil, serr
	}
	if err != nil {
		return nil, fmt.Errorf("agree on cross-memory attach: %w", err)
	}
	c := &cma{min: min, pids: make([]int, n), direct: make([]bool, n)}
	// Every rank decides from the same answers, so all return here alike
	// or all go on to the second AllGather.
	why, agreed, oneProcess := "", cmaAuto, true
	for q, got := range all {
		if len(got) != 40 {
			return nil, fmt.Errorf("agree on cross-memory attach: rank %d sent %d bytes", q, len(got))
		}
		switch int(int64(le.Uint64(got))) {
		case cmaBad:
			return nil, fmt.Errorf("%w: rank %d: bad GOCCL_HOST_CMA or GOCCL_HOST_CMA_MIN", collectives.ErrInvalidArgument, q)
		case cmaOff:
			if why == "" {
				why = fmt.Sprintf("turned off on rank %d (GOCCL_HOST_CMA=0 or a negative Config.CMAMin)", q)
			}
		case cmaOn:
			agreed = cmaOn
		}
		c.pids[q] = int(le.Uint64(got[16:]))
		c.direct[q] = c.pids[q] == os.Getpid() && !cmaDirectOff
		oneProcess = oneProcess && c.direct[q]
	}
	for q, got := range all {
		if qmin := int(le.Uint64(got[8:])); why == "" && qmin != min {
			return nil, fmt.Errorf("%w: rank %d has a single-copy threshold of %d bytes, rank %d of %d",
				collectives.ErrInvalidArgument, q, qmin, rank, min)
		}
	}
	if why == "" && agreed == cmaAuto && !oneProcess {
		// process_vm_readv pins and copies the peer's pages one by one;
		// with ordinary 4 KiB pages that has measured slower than two
		// copies through staging that stays in the caches (docs/perf.md).
		why = "ranks in several processes: process_vm_readv only when asked (GOCCL_HOST_CMA=1)"
	}
	if why == "" && agreed == cmaAuto && n > runtime.NumCPU() {
		// Ranks taking turns on the CPUs gained nothing where measured:
		// the peers' reduced parts are read back from memory, where
		// staging hands them over in the caches.
		why = fmt.Sprintf("%d ranks on %d CPUs: single copy only when asked (GOCCL_HOST_CMA=1)", n, runtime.NumCPU())
	}
	// Probe every peer, even when some rank turned it off, so that both
	// AllGathers happen on every rank.
	outcome := []byte{0}
	if why == "" {
		// This rank's own word too: checkOwn reads through the call.
		for q, got := range all {
			var w uint64
			at := uintptr(le.Uint64(got[24:]))
			err := c.read(c.pids[q], unsafe.Slice((*byte)(unsafe.Pointer(&w)), 8), at)
			if err == nil && w != le.Uint64(got[32:]) {
				err = errors.New("read another value than the one published")
			}
			if err != nil {
				outcome = fmt.Appendf(nil, "\x01rank %d cannot read rank %d's memory (pid %d): %v", rank, q, c.pids[q], err)
				break
			}
		}
	}
	// The peers have all read the probe once every one has answered.
	outcomes, err := b.AllGather(ctx, outcome)
	if err != nil {
		return nil, fmt.Errorf("agree on cross-memory attach: %w", err)
	}
	for _, o := range outcomes {
		if why == "" && len(o) > 1 {
			why = string(o[1:])
		}
	}
	if why != "" {
		cfg.Logger.Debug("goccl: host backend: single copy off, large calls go through staging", "rank", rank, "why", why)
		return nil, nil
	}
	c.chunk = max(cmaBounce/n/lineBytes*lineBytes, 16<<10)
	c.bounce = make([][]byte, n)
	c.send, c.recv, c.words = make([]uintptr, n), make([]uintptr, n), make([][]uint64, n)
	for q := range c.bounce {
		c.bounce[q] = make([]byte, c.chunk)
	}
	return c, nil
}

// attach points c at every rank's published addresses in seg's control
// words.
func (c *cma) attach(peer func(q int) []byte) {
	for q := range c.words {
		c.words[q] = unsafe.Slice((*uint64)(unsafe.Pointer(&peer(q)[offCMA])), 2)
	}
}

// allowPeers lets the job's other processes read this one where Yama's
// ptrace_scope is 1 (only a process the target names may attach): any
// process of this user then may, as with Yama off. Scopes 2 and 3 stay
// closed; the probe then fails and says so.
func allowPeers() {
	s, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil || strings.TrimSpace(string(s)) != "1" {
		return
	}
	_ = unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
}

// read copies len(dst) bytes at address at of process pid into dst.
func (c *cma) read(pid int, dst []byte, at uintptr) error {
	for len(dst) > 0 {
		c.liov[0] = unix.Iovec{Base: &dst[0]}
		c.liov[0].SetLen(len(dst))
		c.riov[0] = unix.RemoteIovec{Base: at, Len: len(dst)}
		got, err := unix.ProcessVMReadv(pid, c.liov[:], c.riov[:], 0)
		if err != nil {
			return err
		}
		if got <= 0 {
			return unix.EFAULT
		}
		// A short read stops where a page could not be had; the rest is
		// tried again, which names the fault.
		dst, at = dst[got:], at+uintptr(got)
	}
	return nil
}

// publish stores this rank's addresses of the call for its peers; they
// read them after the call's first barrier.
func (c *cma) publish(rank int, send, recv uintptr) {
	atomic.StoreUint64(&c.words[rank][0], uint64(send))
	atomic.StoreUint64(&c.words[rank][1], uint64(recv))
}

// collect reads every rank's published addresses of the call.
func (c *cma) collect() {
	for q, w := range c.words {
		c.send[q] = uintptr(atomic.LoadUint64(&w[0]))
		c.recv[q] = uintptr(atomic.LoadUint64(&w[1]))
	}
}

// takes reports whether a goes single-copy: the collectives that have
// such a path, from the threshold on, and AllReduce only where no
// algorithm is forced (a forced one is taken as asked).
func (b *backend) cmaTakes(a *collectives.Args) bool {
	if b.cma == nil || a.Count*a.Type.Size() < b.cma.min {
		return false
	}
	switch a.Coll {
	case collectives.AllReduce:
		return b.algo == ""
	case collectives.AllGather, collectives.Broadcast, collectives.ReduceScatter:
		return true
	}
	return false
}

// describe says, for the ready line, what large calls do.
func (c *cma) describe() string {
	if c == nil {
		return "off (staging only)"
	}
	for _, d := range c.direct {
		if !d {
			return fmt.Sprintf("single copy from %d B (process_vm_readv between processes)", c.min)
		}
	}
	return fmt.Sprintf("single copy from %d B (ranks share the process)", c.min)
}

// checkOwn makes sure this rank's n bytes at addr (its buffer what) are
// there to be read, and written where write: no gap of unmapped pages
// (msync, which only walks the mappings), and the last byte readable and
// writable (a one-byte copy of it onto itself through the kernel, which
// answers EFAULT where a plain access would fault). A count past the
// buffer is then an error before any peer reads or this rank writes.
func (c *cma) checkOwn(rank int, what string, addr uintptr, n int, write bool) error {
	if n == 0 || addr == 0 {
		return nil
	}
	start := addr &^ (pageBytes - 1)
	err := unix.Msync(hostBytes(start, int(addr-start)+n), unix.MS_ASYNC)
	if err == nil {
		var v [1]byte
		last := addr + uintptr(n-1)
		err = c.read(c.pids[rank], v[:], last)
		if err == nil && write {
			c.liov[0] = unix.Iovec{Base: &v[0]}
			c.liov[0].SetLen(1)
			c.riov[0] = unix.RemoteIovec{Base: last, Len: 1}
			_, err = unix.ProcessVMWritev(c.pids[rank], c.liov[:], c.riov[:], 0)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: host: rank %d: its %s buffer of %d bytes at %#x is not all mapped (%w): a count past the buffer?",
			collectives.ErrInvalidArgument, rank, what, n, addr, err)
	}
	return nil
}
