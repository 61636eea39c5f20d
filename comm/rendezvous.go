package comm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/collectives"
)

// Timing of the rendezvous. A genuine rank sends its hello right after
// connecting and rank 0 acknowledges it at once, so both limits only bound
// how long a stranger (or a dead address) can hold a slot.
var (
	helloTimeout = 800 * time.Millisecond // stranger silent this long: dropped
	ackTimeout   = 3 * time.Second        // no ack this long: not our rank 0, retry
	rejectGrace  = time.Second            // see leafHandshake
)

// Reject codes carried in the first byte of a reject frame.
const (
	rejectMismatch = 1
	rejectTimeout  = 2
	rejectOther    = 3
	rejectPeer     = 4 // then rank u32 | cause: that rank failed the init
	// rejectStranger: the connection is not one of this job's ranks (wrong
	// magic, or another user's process); the job goes on. A rank told so
	// retries (the address may be a stale rank 0's) and says why at its
	// init timeout.
	rejectStranger = 5
)

// joinConfig is what a rank brings to the rendezvous.
type joinConfig struct {
	rank, nranks int
	magic        uint64
	pid          int32
	uid          uint32
	nonce        uint64 // rank 0's: names the job's fd sockets (fdsock.go)
	log          *slog.Logger
}

func (c *joinConfig) hello() hello {
	return hello{Magic: c.magic, Version: protocolVersion, NRanks: uint32(c.nranks), Rank: uint32(c.rank), PID: uint32(c.pid)}
}

type arrival struct {
	conn net.Conn
	h    hello
}

// rootRendezvous accepts the other ranks on ln until all have arrived or
// ctx ends. Strangers are dropped without affecting the job; a rank that
// speaks our magic but disagrees with the job fails the whole job, with an
// error naming it, sent to every connected rank. It closes ln.
func rootRendezvous(ctx context.Context, ln net.Listener, c joinConfig) ([]*peer, []int32, error) {
	arrivals := make(chan arrival)
	acceptErr := make(chan error, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Connections still in their handshake; closed when we stop so that no
	// stranger delays the job by its hello timeout.
	var pmu sync.Mutex
	pending := map[net.Conn]struct{}{}
	defer func() {
		close(stop)
		_ = ln.Close()
		pmu.Lock()
		for conn := range pending {
			_ = conn.Close()
		}
		pmu.Unlock()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					// Out of descriptors, say: no rank can join any more.
					acceptErr <- fmt.Errorf("accepting ranks on the bootstrap port: %w", err)
				}
				return
			}
			pmu.Lock()
			pending[conn] = struct{}{}
			pmu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := readHello(conn, c.magic)
				if err == nil {
					// Whoever knows the magic (derived from the address when
					// no job token is set) is not a rank if another user
					// runs it: it must not be able to end the job.
					if uid, ok := tcpPeerUID(conn); ok && uid != c.uid {
						err = fmt.Errorf("a process of uid %d, this job runs as uid %d", uid, c.uid)
					}
				}
				pmu.Lock()
				delete(pending, conn)
				pmu.Unlock()
				if err != nil {
					c.log.Info("goccl: dropped a stranger on the bootstrap port", "remote", conn.RemoteAddr().String(), "why", err)
					if !errors.Is(err, errNoHello) {
						// It may be a rank of another job (or given another
						// token): it hears why at once.
						_ = writeOnce(conn, kindReject, append([]byte{rejectStranger}, "rank 0 at "+conn.LocalAddr().String()+" refused this connection: "+err.Error()...))
					}
					_ = conn.Close()
					return
				}
				select {
				case arrivals <- arrival{conn, h}:
				case <-stop:
					_ = conn.Close()
				}
			}()
		}
	}()

	peers := make([]*peer, c.nranks)
	pids := make([]int32, c.nranks)
	pids[0] = c.pid
	missing := c.nranks - 1
	// A rank that has arrived sends nothing until the welcome, so a read
	// on its connection that ends other than by our deadline means it is
	// gone (or broke the protocol): the job fails now, naming it, instead
	// of at the init timeout.
	lost := make(chan int, c.nranks)
	var watchers sync.WaitGroup
	stopWatching := func() {
		for _, p := range peers {
			if p != nil {
				_ = p.conn.SetReadDeadline(time.Now())
			}
		}
		watchers.Wait()
	}
	defer stopWatching()
	watch := func(r int, conn net.Conn) {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			var b [1]byte
			if _, err := conn.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
				lost <- r
			}
		}()
	}
	fail := func(code byte, bad net.Conn, err error) ([]*peer, []int32, error) {
		msg := append([]byte{code}, []byte(errorDetail(err))...)
		// A rank at fault is sent as such, so that every rank's error
		// names it through *PeerError, not only rank 0's.
		if pe := (*collectives.PeerError)(nil); code == rejectOther && errors.As(err, &pe) {
			msg = append([]byte{rejectPeer}, encodeFailed(pe.Rank, pe.Cause.Error())...)
		}
		if bad != nil {
			_ = writeOnce(bad, kindReject, msg)
			_ = bad.Close()
		}
		for _, p := range peers {
			if p != nil {
				_ = writeOnce(p.conn, kindReject, msg)
				_ = p.conn.Close()
			}
		}
		return nil, nil, err
	}
	for missing > 0 {
		select {
		case a := <-arrivals:
			if err := checkArrival(a.h, c, peers); err != nil {
				return fail(rejectMismatch, a.conn, err)
			}
			r := int(a.h.Rank)
			peers[r] = newPeer(r, a.conn)
			pids[r] = int32(a.h.PID)
			missing--
			// The ack tells the rank it reached this job's rank 0.
			if err := writeOnce(a.conn, kindHeartbeat, nil); err != nil {
				return fail(rejectOther, nil, &collectives.PeerError{Rank: r, Cause: fmt.Errorf("disconnected during init: %w", err)})
			}
			c.log.Debug("goccl: rank arrived", "rank", r, "missing", missing)
			watch(r, a.conn)
		case r := <-lost:
			return fail(rejectOther, nil, &collectives.PeerError{Rank: r, Cause: errors.New("connected, then disconnected before the job formed (process exited?)")})
		case err := <-acceptErr:
			return fail(rejectOther, nil, err)
		case <-ctx.Done():
			return fail(rejectTimeout, nil, fmt.Errorf("%w: rank 0: ranks %s did not join within the init timeout (%d of %d present): %v",
				collectives.ErrTimeout, absent(peers), c.nranks-missing, c.nranks, ctx.Err()))
		}
	}
	stopWatching()
	select {
	case r := <-lost:
		return fail(rejectOther, nil, &collectives.PeerError{Rank: r, Cause: errors.New("connected, then disconnected before the job formed (process exited?)")})
	default:
	}
	for r := 1; r < c.nranks; r++ {
		_ = peers[r].conn.SetReadDeadline(time.Time{})
	}
	welcome := encodeWelcome(pids, c.nonce)
	for r := 1; r < c.nranks; r++ {
		if err := writeOnce(peers[r].conn, kindWelcome, welcome); err != nil {
			return fail(rejectOther, nil, &collectives.PeerError{Rank: r, Cause: fmt.Errorf("disconnected during init: %w", err)})
		}
	}
	return peers, pids, nil
}

// errorDetail strips our sentinel prefixes so the receiver can re-wrap the
// same text with the same sentinel and fail with the same message.
func errorDetail(err error) string {
	s := err.Error()
	for _, p := range []string{ErrMismatch.Error() + ": ", collectives.ErrTimeout.Error() + ": "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

func absent(peers []*peer) string {
	var out []string
	for r := 1; r < len(peers); r++ {
		if peers[r] == nil {
			out = append(out, fmt.Sprint(r))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// readHello reads a connection's opening bytes within helloTimeout and
// checks the magic. Anything else is a stranger.
func readHello(conn net.Conn, magic uint64) (hello, error) {
	var buf [helloSize]byte
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	if _, err := io.ReadFull(conn, buf[:]); err != nil {
		return hello{}, fmt.Errorf("%w: %w", errNoHello, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	h, err := decodeHello(buf[:])
	if err != nil {
		return h, err
	}
	if h.Magic != magic {
		return h, fmt.Errorf("wrong magic %#x", h.Magic)
	}
	return h, nil
}

// errNoHello: the connection sent no whole hello in time.
var errNoHello = errors.New("no hello")

// checkArrival validates a hello that carries the job's magic.
func checkArrival(h hello, c joinConfig, peers []*peer) error {
	switch {
	case h.Version != protocolVersion:
		return fmt.Errorf("%w: rank %d speaks bootstrap protocol version %d, rank 0 speaks %d", ErrMismatch, h.Rank, h.Version, protocolVersion)
	case int64(h.NRanks) != int64(c.nranks):
		return fmt.Errorf("%w: rank %d says nranks=%d, rank 0 has %d", ErrMismatch, h.Rank, h.NRanks, c.nranks)
	case int64(h.Rank) >= int64(c.nranks):
		return fmt.Errorf("%w: rank %d out of range: nranks=%d", ErrMismatch, h.Rank, c.nranks)
	case h.Rank == 0 || peers[h.Rank] != nil:
		return fmt.Errorf("%w: rank %d joined twice (duplicate rank)", ErrMismatch, h.Rank)
	case h.PID == 0:
		return fmt.Errorf("%w: rank %d sent pid 0", ErrMismatch, h.Rank)
	}
	return nil
}

// writeOnce writes one frame on a connection not yet shared.
func writeOnce(conn net.Conn, kind uint8, payload []byte) error {
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := conn.Write(appendFrame(nil, kind, 0, payload))
	return err
}

// leafRendezvous dials rank 0 (resolve gives its current id: fixed for
// InitRank, re-read from a file for mpirun jobs) with backoff until ctx
// ends, and waits for the welcome. It returns rank 0's connection, every
// rank's pid, the job's magic and rank 0's fd-socket nonce.
func leafRendezvous(ctx context.Context, resolve func() (UniqueID, error), c joinConfig) (*peer, []int32, uint64, uint64, error) {
	backoff := 10 * time.Millisecond
	var last error
	where := "rank 0"
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-ctx.Done():
				return nil, nil, 0, 0, fmt.Errorf("%w: %s not reached within the init timeout (%d attempts): %v", collectives.ErrTimeout, where, attempt, last)
			case <-time.After(d):
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		}
		id, err := resolve()
		if err != nil {
			last = err
			if ctx.Err() != nil {
				return nil, nil, 0, 0, fmt.Errorf("%w: rank 0's address not found within the init timeout: %v", collectives.ErrTimeout, last)
			}
			continue
		}
		c.magic = id.Magic() // file mode learns it from rank 0's file
		where = "rank 0 at " + id.Addr().String()
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", id.Addr().String())
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
			// Out of a local resource: retrying until the timeout would
			// only hide the cause.
			return nil, nil, 0, 0, fmt.Errorf("connecting to rank 0 at %s: %w", id.Addr(), err)
		}
		if err != nil {
			last = err
			if ctx.Err() != nil {
				return nil, nil, 0, 0, fmt.Errorf("%w: rank 0 at %s not reached within the init timeout (%d attempts): %v", collectives.ErrTimeout, id.Addr(), attempt+1, last)
			}
			continue
		}
		p, pids, nonce, retry, err := leafHandshake(ctx, conn, c)
		if err == nil {
			return p, pids, c.magic, nonce, nil
		}
		_ = conn.Close()
		if !retry {
			return nil, nil, 0, 0, err
		}
		last = err
		c.log.Debug("goccl: rendezvous attempt failed", "rank", c.rank, "addr", id.Addr().String(), "err", err)
	}
}

// leafHandshake sends the hello and waits for the ack, then the welcome.
// No ack means the address is not (or no longer) this job's rank 0: retry.
func leafHandshake(ctx context.Context, conn net.Conn, c joinConfig) (p *peer, pids []int32, nonce uint64, retry bool, err error) {
	hb := encodeHello(c.hello())
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write(hb[:]); err != nil {
		return nil, nil, 0, true, err
	}
	// Once rank 0 has acknowledged us, it knows more than we do about a
	// job that does not form (which ranks are missing): when our init
	// time is up, we wait rejectGrace longer for its reject, which says.
	var ackedFlag atomic.Bool
	expiry := func() time.Time {
		if ackedFlag.Load() {
			return time.Now().Add(rejectGrace)
		}
		return time.Now()
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(expiry()) })
	defer stop()
	hdr := make([]byte, frameHeaderSize)
	acked := false
	for {
		dl := time.Now().Add(ackTimeout)
		if acked {
			dl = time.Time{}
		}
		if ctx.Err() != nil {
			dl = expiry()
		}
		_ = conn.SetReadDeadline(dl)
		h, payload, err := readFrame(conn, hdr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, 0, false, fmt.Errorf("%w: the job did not form within the init timeout: %v", collectives.ErrTimeout, ctx.Err())
			}
			if acked {
				return nil, nil, 0, false, &collectives.PeerError{Rank: 0, Cause: fmt.Errorf("lost during init: %w", err)}
			}
			return nil, nil, 0, true, fmt.Errorf("no answer from rank 0: %w", err)
		}
		switch h.Kind {
		case kindHeartbeat:
			acked = true
			ackedFlag.Store(true)
		case kindWelcome:
			pids, nonce, err := decodeWelcome(payload, c.nranks)
			if err != nil {
				return nil, nil, 0, false, &collectives.PeerError{Rank: 0, Cause: err}
			}
			_ = conn.SetDeadline(time.Time{})
			return newPeer(0, conn), pids, nonce, false, nil
		case kindReject:
			if len(payload) > 0 && payload[0] == rejectStranger && !acked {
				msg, derr := decodeReject(payload[1:])
				if derr != nil {
					return nil, nil, 0, true, derr
				}
				return nil, nil, 0, true, errors.New(msg)
			}
			return nil, nil, 0, false, rejection(payload)
		default:
			return nil, nil, 0, !acked, fmt.Errorf("%w: %s frame during rendezvous", errMalformed, kindNames[h.Kind])
		}
	}
}

// rejection rebuilds rank 0's error so that both fail with one message.
func rejection(payload []byte) error {
	if len(payload) == 0 {
		return fmt.Errorf("%w: empty reject", errMalformed)
	}
	if payload[0] == rejectPeer {
		r, msg, err := decodeFailed(payload[1:], maxRanks)
		if err != nil {
			return err
		}
		return &collectives.PeerError{Rank: r, Cause: errors.New(msg)}
	}
	msg, err := decodeReject(payload[1:])
	if err != nil {
		return err
	}
	switch payload[0] {
	case rejectMismatch:
		return fmt.Errorf("%w: %s", ErrMismatch, msg)
	case rejectTimeout:
		return fmt.Errorf("%w: %s", collectives.ErrTimeout, msg)
	}
	return errors.New("rank 0 rejected this rank: " + msg)
}
