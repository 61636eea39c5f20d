package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// The memory of one Alloc (alloc.go), mapped once per process. Each rank
// creates a sealed memfd of the size asked for and maps it; ranks of
// another process get its descriptor over the bootstrap and map it, once
// in their process whichever of its ranks gets there first; ranks of the
// same process use the owner's mapping. So n ranks in one process make n
// mappings of an Alloc, not n×n, and any mix of processes makes one
// mapping of each rank's memory per process.
//
// A process-wide table counts, for each mapping, the ranks of this
// process that hold it; the last to let go unmaps it. A rank that closes
// its allocation, or its backend, early thus never unmaps memory a peer
// of its process still uses, as a rank of another process keeps its own
// mapping alive. The table's keys are the owner's process token and a
// number its process never gives twice, so a stale entry can never be
// taken for a new allocation at the same address.

// allocMemfd names the memfds of allocations in /proc/*/maps.
const allocMemfd = "goccl-alloc"

// procToken tells this process from every other one of the node: a pid
// alone can repeat across PID namespaces on one machine.
var procToken = rand.Uint64() | 1

// memfdCreate is unix.MemfdCreate; tests make it fail.
var memfdCreate = unix.MemfdCreate

// mapKey names one rank's memory of one Alloc, on every rank alike.
type mapKey struct{ token, serial uint64 }

// procMap is one mapping of this process and how many ranks hold it.
type procMap struct {
	mem  []byte
	refs int
}

var procMaps = struct {
	sync.Mutex
	serial uint64
	m      map[mapKey]*procMap
}{m: map[mapKey]*procMap{}}

// allocMem is one Alloc as one rank sees it: every rank's memory, mapped
// in this process.
type allocMem struct {
	Local []byte   // this rank's own memory
	keys  []mapKey // keys[q]: rank q's memory, held by this rank while held[q]
	held  []bool
	views [][]byte // views[q]: rank q's memory, as mapped here
}

// Peer is rank q's memory as mapped in this process; nil after Close.
func (s *allocMem) Peer(q int) []byte { return s.views[q] }

// Close lets go of every rank's memory; a mapping goes away when the
// last rank of this process holding it lets go. Safe to call twice.
func (s *allocMem) Close() error {
	var errs []error
	for q := range s.keys {
		if s.held[q] {
			errs = append(errs, releaseMap(s.keys[q]))
			s.held[q] = false
		}
		s.views[q] = nil
	}
	s.Local = nil
	return errors.Join(errs...)
}

// createMap makes this rank's memfd of size bytes (a whole number of
// pages), sealed at that size so that a peer can trust it, maps it
// populated, and enters the mapping in the table held once.
func createMap(size int) (int, mapKey, []byte, error) {
	fd, err := memfdCreate(allocMemfd, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, mapKey{}, nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, mapKey, []byte, error) {
		_ = unix.Close(fd)
		return -1, mapKey{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Sprintf("ftruncate memfd to %d bytes", size), err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal memfd", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Sprintf("mmap own %d bytes", size), err)
	}
	procMaps.Lock()
	procMaps.serial++
	key := mapKey{procToken, procMaps.serial}
	procMaps.m[key] = &procMap{mem: mem, refs: 1}
	procMaps.Unlock()
	return fd, key, mem, nil
}

// holdMap takes one more hold of a mapping of this process; nil when it
// is gone (its owner failed and let go).
func holdMap(key mapKey) []byte {
	procMaps.Lock()
	defer procMaps.Unlock()
	pm := procMaps.m[key]
	if pm == nil {
		return nil
	}
	pm.refs++
	return pm.mem
}

// adoptMap holds the mapping of another process's memory key, mapping
// fd (size bytes, checked) if no rank of this process has yet.
func adoptMap(key mapKey, fd, size, q int) ([]byte, error) {
	procMaps.Lock()
	defer procMaps.Unlock()
	if pm := procMaps.m[key]; pm != nil {
		pm.refs++
		return pm.mem, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat rank %d's memfd: %w", q, err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%w: rank %d's memfd has %d bytes, want %d", collectives.ErrInvalidArgument, q, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap rank %d's memfd: %w", q, err)
	}
	procMaps.m[key] = &procMap{mem: mem, refs: 1}
	return mem, nil
}

// releaseMap lets go of one hold; the last unmaps.
func releaseMap(key mapKey) error {
	procMaps.Lock()
	defer procMaps.Unlock()
	pm := procMaps.m[key]
	if pm == nil {
		return nil
	}
	if pm.refs--; pm.refs > 0 {
		return nil
	}
	delete(procMaps.m, key)
	return unix.Munmap(pm.mem)
}

// mapAlloc maps one Alloc of size bytes (rounded up to a page) on every
// rank of b: collective. A failure on any rank fails every rank, naming
// the rank it happened on, so that none waits for descriptors that will
// never come.
func mapAlloc(ctx context.Context, b transport.Bootstrap, size int) (*allocMem, error) {
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	me, n := b.Rank(), b.Size()
	s := &allocMem{keys: make([]mapKey, n), held: make([]bool, n), views: make([][]byte, n)}
	fd, key, mem, lerr := createMap(size)
	le := binary.LittleEndian
	msg := []byte{0}
	if lerr == nil {
		s.keys[me], s.held[me], s.views[me], s.Local = key, true, mem, mem
		msg = le.AppendUint64(le.AppendUint64([]byte{1}, key.token), key.serial)
	} else {
		msg = append(msg, lerr.Error()...)
	}
	all, err := b.AllGather(ctx, msg)
	closeFD := func() {
		if fd >= 0 {
			_ = unix.Close(fd)
			fd = -1
		}
	}
	defer closeFD()
	fail := func(err error) (*allocMem, error) {
		closeFD()
		_ = s.Close()
		return nil, err
	}
	if lerr != nil {
		return fail(lerr)
	}
	if err != nil {
		return fail(fmt.Errorf("exchange allocation keys: %w", err))
	}
	for q, m := range all {
		switch {
		case len(m) > 0 && m[0] == 0:
			return fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf("creating its memory failed: %s", m[1:])})
		case len(m) != 17:
			return fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf("%w: sent an allocation key of %d bytes", collectives.ErrInvalidArgument, len(m))})
		}
		s.keys[q] = mapKey{le.Uint64(m[1:]), le.Uint64(m[9:])}
	}
	// Descriptors go to the ranks of other processes only; sends do not
	// block on the peer, so all go out before any is awaited. A failed
	// send or receive goes on with the others and fails every rank in the
	// agreement below rather than leaving them waiting there (a receiver
	// this rank could not send to still waits for its descriptor).
	other := func(q int) bool { return q != me && s.keys[q].token != procToken }
	var merr error
	for q := 0; q < n; q++ {
		if other(q) {
			if err := b.SendFDs(ctx, q, []int{fd}); err != nil && merr == nil {
				merr = fmt.Errorf("send rank %d the memfd: %w", q, err)
			}
		}
	}
	closeFD() // the mapping keeps the memory alive
	for q := 0; q < n; q++ {
		switch {
		case q == me:
		case other(q):
			fds, err := b.RecvFDs(ctx, q, 1)
			if err != nil {
				if merr == nil {
					merr = fmt.Errorf("receive rank %d's memfd: %w", q, err)
				}
				continue
			}
			if merr == nil {
				s.views[q], merr = adoptMap(s.keys[q], fds[0], size, q)
				s.held[q] = merr == nil
			}
			_ = unix.Close(fds[0])
		case merr == nil:
			// The owner holds its mapping until every rank has answered
			// below; a miss means it failed and let go.
			if s.views[q] = holdMap(s.keys[q]); s.views[q] == nil {
				merr = fmt.Errorf("rank %d's memory is gone from this process", q)
			}
			s.held[q] = merr == nil
		}
	}
	out := []byte{}
	if merr != nil {
		out = []byte(merr.Error())
	}
	outs, err := b.AllGather(ctx, out)
	switch {
	case merr != nil:
		return fail(merr)
	case err != nil:
		return fail(fmt.Errorf("agree on the mappings: %w", err))
	}
	for q, o := range outs {
		if len(o) > 0 {
			return fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf("mapping the allocation failed there: %s", o)})
		}
	}
	return s, nil
}
