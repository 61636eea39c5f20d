package shm

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Segment is this rank's shared segment and its mappings of every peer's.
// All segments of a job have the same size. Peer memory is mapped
// MAP_SHARED, so writes by any rank are seen by all; synchronizing them is
// the caller's business (sync/atomic on aligned words works across
// processes).
type Segment struct {
	// Local is this rank's segment, zero-filled at Map.
	Local []byte
	rank  int
	peers [][]byte // peers[rank] aliases Local
}

// ErrBadSize is wrapped by Map when size is not positive or a peer's
// segment does not have the size this rank asked for.
var ErrBadSize = errors.New("shm: bad segment size")

// Map creates this rank's segment of size bytes (rounded up to a page),
// passes its descriptor to every peer through b, and maps every peer's
// segment. It is collective: every rank calls it with the same size. A
// failure on any rank makes every rank return an error naming that rank,
// so that no rank waits for descriptors that will never come.
func Map(ctx context.Context, b transport.Bootstrap, size int) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSize, size)
	}
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	me, n := b.Rank(), b.Size()

	fd, local, lerr := create(size)
	// Everyone learns whether everyone has a segment before any rank
	// waits for descriptors.
	if err := agree(ctx, b, "create segment", lerr); err != nil {
		if lerr == nil {
			_ = sys.munmap(local)
			_ = sys.close(fd)
		}
		return nil, err
	}
	s := &Segment{Local: local, rank: me, peers: make([][]byte, n)}
	s.peers[me] = local

	all, err := transport.ExchangeFDs(ctx, b, []int{fd})
	_ = sys.close(fd) // the mapping keeps the memory alive
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("shm: exchange segment descriptors: %w", err)
	}
	var merr error
	for r := 0; r < n; r++ {
		if r == me {
			continue
		}
		pfd := all[r][0]
		if merr == nil {
			s.peers[r], merr = mapPeer(pfd, r, size)
		}
		_ = sys.close(pfd)
	}
	if err := agree(ctx, b, "map segments", merr); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// create makes a sealed memfd of size bytes and maps it.
func create(size int) (int, []byte, error) {
	fd, err := sys.memfdCreate("goccl-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, []byte, error) {
		_ = sys.close(fd)
		return -1, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := sys.ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Sprintf("ftruncate memfd to %d bytes", size), err)
	}
	// Sealing the size means a peer can trust it: no rank can shrink the
	// file under another's mapping (which would SIGBUS it).
	if _, err := sys.fcntl(fd, unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal memfd", err)
	}
	mem, err := sys.mmap(fd, size, unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Sprintf("mmap own %d-byte segment", size), err)
	}
	return fd, mem, nil
}

func mapPeer(fd, r, size int) ([]byte, error) {
	got, err := sys.fstatSize(fd)
	if err != nil {
		return nil, fmt.Errorf("fstat rank %d's segment: %w", r, err)
	}
	if got != int64(size) {
		return nil, fmt.Errorf("%w: rank %d's segment has %d bytes, want %d", ErrBadSize, r, got, size)
	}
	mem, err := sys.mmap(fd, size, 0)
	if err != nil {
		return nil, fmt.Errorf("mmap rank %d's segment: %w", r, err)
	}
	return mem, nil
}

// RankError is returned by Map on ranks whose own step succeeded when
// another rank's failed.
type RankError struct {
	Rank int
	Step string
	Msg  string
}

// Error names the step, the rank it failed on and its message.
func (e *RankError) Error() string {
	return fmt.Sprintf("shm: %s failed on rank %d: %s", e.Step, e.Rank, e.Msg)
}

// agree allgathers each rank's outcome of step; the local error wins,
// else the first failing rank's.
func agree(ctx context.Context, b transport.Bootstrap, step string, local error) error {
	msg := []byte{}
	if local != nil {
		msg = []byte(local.Error())
	}
	all, err := b.AllGather(ctx, msg)
	if local != nil {
		return fmt.Errorf("shm: %s: %w", step, local)
	}
	if err != nil {
		return fmt.Errorf("shm: %s: bootstrap allgather: %w", step, err)
	}
	for r, m := range all {
		if len(m) > 0 {
			return &RankError{Rank: r, Step: step, Msg: string(m)}
		}
	}
	return nil
}

// Rank is the rank this segment belongs to.
func (s *Segment) Rank() int { return s.rank }

// Size is the size in bytes of every rank's segment.
func (s *Segment) Size() int { return len(s.Local) }

// Peer returns this process's mapping of rank r's segment (Local for r
// == Rank()); nil after Close or for r out of range.
func (s *Segment) Peer(r int) []byte {
	if r < 0 || r >= len(s.peers) {
		return nil
	}
	return s.peers[r]
}

// Close unmaps every segment; the memory goes away when the last rank has
// unmapped it. Safe to call twice. Using the slices afterwards faults.
func (s *Segment) Close() error {
	var errs []error
	for r, m := range s.peers {
		if m == nil {
			continue
		}
		if err := sys.munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("munmap rank %d's segment: %w", r, err))
		}
		s.peers[r] = nil
	}
	s.Local = nil
	return errors.Join(errs...)
}
