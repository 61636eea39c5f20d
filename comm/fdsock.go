package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
)

// fdSocket is a rank's Unix datagram socket for passing descriptors. Its
// abstract name carries the job token, so jobs never meet, and a nonce
// rank 0 draws and sends in the welcome, so that no process outside the
// job (which may know the token: it can be derived from the address)
// can take a rank's name before the rank binds it. Datagrams keep
// each message and its descriptors together. The kernel attaches the
// sender's credentials to every datagram (SO_PASSCRED); a message is
// accepted only from our uid and from the pid that the rendezvous
// recorded for the rank the message claims to come from. Anything else is
// dropped and every descriptor it carried is closed.
type fdSocket struct {
	conn  *net.UnixConn
	token string
	nonce uint64
	rank  int
	log   *slog.Logger

	// Set by start, before the reader runs.
	magic uint64
	pids  []int32
	uid   uint32
	queue []chan fdItem // per sender

	drops dropLog // reader only, then close

	smu     sync.Mutex // serializes sends (one write deadline per socket)
	wg      sync.WaitGroup
	closed  chan struct{}
	started bool
}

// maxFDsPerMsg bounds descriptors in one message (the kernel's SCM_MAX_FD
// is 253).
const maxFDsPerMsg = 64

// fdQueue bounds messages waiting per sender.
const fdQueue = 64

func fdSocketName(token string, rank int, nonce uint64) string {
	return fmt.Sprintf("@goccl-%s-%d-%016x", token, rank, nonce)
}

// bindFDSocket binds rank's socket, once the rendezvous gave the nonce:
// before this rank contributes to any bootstrap op, so every socket exists
// by the time any rank sends descriptors (after a first op completes).
func bindFDSocket(token string, rank int, nonce uint64, log *slog.Logger) (*fdSocket, error) {
	name := fdSocketName(token, rank, nonce)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("its fd socket %q is taken by another process: %w", name[1:], err)
	}
	if err != nil {
		return nil, fmt.Errorf("binding fd socket %q: %w", name[1:], err)
	}
	rc, err := conn.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("SO_PASSCRED on fd socket: %w", err)
	}
	return &fdSocket{conn: conn, token: token, nonce: nonce, rank: rank, log: log, closed: make(chan struct{})}, nil
}

// start begins receiving once the job's pids are known.
func (s *fdSocket) start(magic uint64, pids []int32) {
	s.magic = magic
	s.pids = pids
	s.uid = uint32(os.Getuid())
	s.queue = make([]chan fdItem, len(pids))
	for i := range s.queue {
		s.queue[i] = make(chan fdItem, fdQueue)
	}
	s.started = true
	s.wg.Add(1)
	go s.readLoop()
}

// fdItem is one received message: its descriptors, or why they were lost.
type fdItem struct {
	fds []int
	err error
}

// fd message payload: "GFD1" | magic u64 | sender u32 | nfds u32.
const fdMsgSize = 20

type fdMsg struct {
	Magic  uint64
	Sender uint32
	NFDs   uint32
}

func encodeFDMsg(m fdMsg) []byte {
	b := make([]byte, fdMsgSize)
	copy(b, "GFD1")
	binary.BigEndian.PutUint64(b[4:], m.Magic)
	binary.BigEndian.PutUint32(b[12:], m.Sender)
	binary.BigEndian.PutUint32(b[16:], m.NFDs)
	return b
}

func decodeFDMsg(b []byte) (fdMsg, error) {
	if len(b) != fdMsgSize || string(b[:4]) != "GFD1" {
		return fdMsg{}, fmt.Errorf("%w: fd message of %d bytes", errMalformed, len(b))
	}
	m := fdMsg{Magic: binary.BigEndian.Uint64(b[4:]), Sender: binary.BigEndian.Uint32(b[12:]), NFDs: binary.BigEndian.Uint32(b[16:])}
	if m.NFDs > maxFDsPerMsg {
		return m, fmt.Errorf("%w: fd message claims %d descriptors", errMalformed, m.NFDs)
	}
	return m, nil
}

func (s *fdSocket) readLoop() {
	defer s.wg.Done()
	buf := make([]byte, fdMsgSize+1)
	oob := make([]byte, unix.CmsgSpace(4*maxFDsPerMsg)+unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("goccl: fd socket read", "rank", s.rank, "err", err)
			select {
			case <-s.closed:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		fds, cred := parseControl(oob[:oobn])
		item := fdItem{fds: fds}
		sender, err := s.accept(buf[:n], flags, fds, cred)
		if err != nil {
			closeFDs(fds)
			if lost := s.lostFDs(buf[:n], flags, cred); lost >= 0 {
				// A genuine message whose descriptors this process could not
				// take: its receiver must fail, not wait for them.
				item = fdItem{err: fmt.Errorf("descriptors sent by rank %d were lost: the kernel truncated the message (this process is probably out of file descriptors: RLIMIT_NOFILE): %w", lost, unix.EMFILE)}
				sender = lost
			} else {
				s.drops.note(s.log, s.rank, cred, err)
				continue
			}
		}
		select {
		case s.queue[sender] <- item:
		default:
			closeFDs(item.fds)
			s.log.Warn("goccl: dropped fds: too many queued", "rank", s.rank, "sender", sender)
		}
	}
}

// accept checks one received message; pure but for s's fields.
func (s *fdSocket) accept(payload []byte, flags int, fds []int, cred *unix.Ucred) (int, error) {
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		return 0, fmt.Errorf("truncated message (flags %#x)", flags)
	}
	if cred == nil {
		return 0, errors.New("no sender credentials")
	}
	// Another user's message is not even parsed.
	if cred.Uid != s.uid {
		return 0, fmt.Errorf("from pid %d: uid %d, this job runs as %d", cred.Pid, cred.Uid, s.uid)
	}
	m, err := decodeFDMsg(payload)
	if err != nil {
		return 0, fmt.Errorf("from pid %d: %w", cred.Pid, err)
	}
	switch {
	case m.Magic != s.magic:
		return 0, fmt.Errorf("from pid %d: wrong magic", cred.Pid)
	case int64(m.Sender) >= int64(len(s.pids)):
		return 0, fmt.Errorf("from pid %d: claims rank %d of %d", cred.Pid, m.Sender, len(s.pids))
	case cred.Pid != s.pids[m.Sender]:
		return 0, fmt.Errorf("pid %d claims rank %d, whose pid is %d", cred.Pid, m.Sender, s.pids[m.Sender])
	case int(m.NFDs) != len(fds):
		return 0, fmt.Errorf("rank %d: message says %d fds, carried %d", m.Sender, m.NFDs, len(fds))
	}
	return int(m.Sender), nil
}

// lostFDs returns the sender of a message that is genuine in every way
// but had its control data truncated (MSG_CTRUNC: the kernel could not
// install the descriptors here), or -1.
func (s *fdSocket) lostFDs(payload []byte, flags int, cred *unix.Ucred) int {
	if flags&unix.MSG_CTRUNC == 0 || flags&unix.MSG_TRUNC != 0 || cred == nil {
		return -1
	}
	m, err := decodeFDMsg(payload)
	if err != nil || m.Magic != s.magic || int64(m.Sender) >= int64(len(s.pids)) ||
		cred.Uid != s.uid || cred.Pid != s.pids[m.Sender] {
		return -1
	}
	return int(m.Sender)
}

// parseControl collects every descriptor (so that all can be closed on
// rejection) and the credentials.
func parseControl(oob []byte) ([]int, *unix.Ucred) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, nil
	}
	var fds []int
	var cred *unix.Ucred
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_RIGHTS:
			if got, err := unix.ParseUnixRights(m); err == nil {
				fds = append(fds, got...)
			}
		case unix.SCM_CREDENTIALS:
			if c, err := unix.ParseUnixCredentials(m); err == nil {
				cred = c
			}
		}
	}
	return fds, cred
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

func (s *fdSocket) send(ctx context.Context, peer int, fds []int) error {
	if peer < 0 || peer >= len(s.pids) {
		return fmt.Errorf("%w: SendFDs to rank %d of %d", collectives.ErrInvalidArgument, peer, len(s.pids))
	}
	if len(fds) > maxFDsPerMsg {
		return fmt.Errorf("%w: SendFDs of %d descriptors, at most %d per message", collectives.ErrInvalidArgument, len(fds), maxFDsPerMsg)
	}
	payload := encodeFDMsg(fdMsg{Magic: s.magic, Sender: uint32(s.rank), NFDs: uint32(len(fds))})
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	addr := &net.UnixAddr{Name: fdSocketName(s.token, peer, s.nonce), Net: "unixgram"}
	s.smu.Lock()
	defer s.smu.Unlock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	_ = s.conn.SetWriteDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, _, err := s.conn.WriteMsgUnix(payload, oob, addr); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: SendFDs to rank %d: %v", collectives.ErrTimeout, peer, ctx.Err())
		}
		return &collectives.PeerError{Rank: peer, Cause: fmt.Errorf("fd socket: %w", err)}
	}
	return nil
}

func (s *fdSocket) recv(ctx context.Context, peer, n int, failed <-chan struct{}, failure func() error) ([]int, error) {
	if peer < 0 || peer >= len(s.pids) {
		return nil, fmt.Errorf("%w: RecvFDs from rank %d of %d", collectives.ErrInvalidArgument, peer, len(s.pids))
	}
	select {
	case it := <-s.queue[peer]:
		if it.err != nil {
			return nil, it.err
		}
		fds := it.fds
		if len(fds) != n {
			closeFDs(fds)
			return nil, fmt.Errorf("%w: rank %d sent %d descriptors, rank %d expected %d", ErrMismatch, peer, len(fds), s.rank, n)
		}
		return fds, nil
	case <-failed:
		return nil, failure()
	case <-s.closed:
		return nil, fmt.Errorf("RecvFDs: %w", collectives.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: RecvFDs on rank %d: rank %d sent nothing: %v", collectives.ErrTimeout, s.rank, peer, ctx.Err())
	}
}

// close stops the reader and closes every descriptor still queued.
func (s *fdSocket) close() {
	select {
	case <-s.closed:
		return
	default:
	}
	close(s.closed)
	_ = s.conn.Close()
	s.wg.Wait()
	s.drops.flush(s.log, s.rank)
	for _, q := range s.queue {
		for {
			select {
			case it := <-q:
				closeFDs(it.fds)
				continue
			default:
			}
			break
		}
	}
}

// dropLog rate-limits the warnings about dropped fd-socket messages: any
// local process can send them, and a line per message would let it flood
// the log. One line per sending pid per dropInterval, carrying how many
// were dropped since that pid's last line; close says the rest.
type dropLog struct {
	bySrc map[int32]*dropCount
}

type dropCount struct {
	last time.Time
	n    int
	why  error
}

const (
	dropInterval = 10 * time.Second
	dropSources  = 64 // pids tracked apiece; the others share one entry
)

func (d *dropLog) note(log *slog.Logger, rank int, cred *unix.Ucred, why error) {
	src := int32(-1)
	if cred != nil {
		src = cred.Pid
	}
	if d.bySrc == nil {
		d.bySrc = map[int32]*dropCount{}
	}
	c := d.bySrc[src]
	if c == nil {
		if len(d.bySrc) >= dropSources {
			src = -1
		}
		if c = d.bySrc[src]; c == nil {
			c = &dropCount{}
			d.bySrc[src] = c
		}
	}
	c.n++
	c.why = why
	now := time.Now()
	if c.last.IsZero() || now.Sub(c.last) >= dropInterval {
		log.Warn("goccl: dropped messages on the fd socket", "rank", rank, "from_pid", src, "count", c.n, "why", why)
		c.last, c.n = now, 0
	}
}

// flush logs the drops not yet logged.
func (d *dropLog) flush(log *slog.Logger, rank int) {
	for src, c := range d.bySrc {
		if c.n > 0 {
			log.Warn("goccl: dropped messages on the fd socket", "rank", rank, "from_pid", src, "count", c.n, "why", c.why)
			c.n = 0
		}
	}
}
