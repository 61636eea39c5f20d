package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/goccl/goccl/collectives"
)

// NoColor passed to Split as the color leaves the caller out of every new
// communicator (NCCL_SPLIT_NOCOLOR); Split then returns nil, nil.
const NoColor = -1

// Split makes a new communicator of the ranks that pass the same color,
// numbered by key (ties by parent rank), as ncclCommSplit. It is
// collective over the parent: every rank calls it, each with its own color
// and key. A rank passing NoColor joins no communicator and gets nil, nil;
// any other negative color is an error, on every rank (so that none waits
// for the rank at fault). A color only one rank passes gives that rank a
// valid one-rank communicator, as NCCL does.
//
// The ranks exchange their colors and keys through the parent's bootstrap
// in one step, so that every rank learns every group at once and none
// waits on a rank of another color; each new rank 0 then sends its group
// a fresh unique id (a new secret) in a second step, and each group forms
// its own communicator as init does. A group on one node meets over
// socket pairs its rank 0 hands out through the parent's fd sockets, with
// no new listener and no dial (splitpairs.go); a group across nodes over a
// new listener of its rank 0 on the parent's interface. The child gets its
// own bootstrap and backend (the same
// backend, device and settings as the parent; the non-zero fields of opts
// override them, and the environment is not read again): Close and Abort
// on either leave the other alone, and children may be split in turn.
func (c *Comm) Split(ctx context.Context, color, key int, opts Options) (*Comm, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	set, serr := c.childSettings(opts)
	if serr == nil && color < NoColor {
		serr = fmt.Errorf("%w: color %d: want a color >= 0, or NoColor (%d)", collectives.ErrInvalidArgument, color, NoColor)
	}
	spec, ln, err := c.splitExchange(ctx, color, key, serr)
	if err != nil {
		return nil, fmt.Errorf("goccl: rank %d: Split: %w", c.rank, err)
	}
	if color == NoColor {
		return nil, nil
	}
	if ln != nil {
		defer ln.Close() // taken over by the child's bootstrap; closing twice is harmless
	}
	if spec.conn != nil {
		// The child's rescue point listens where the parent's does (its
		// star has no address to learn one from).
		if !set.ifIP.IsValid() {
			set.ifIP = c.rescue.ip
		}
	}
	child, err := initResolved(ctx, spec, set)
	if spec.conn != nil && err != nil {
		_ = spec.conn.Close() // closing twice is harmless
	}
	if err != nil {
		return nil, fmt.Errorf("goccl: rank %d: Split: color %d: %w", c.rank, color, err)
	}
	return child, nil
}

// splitExchange runs Split's two steps over the parent's bootstrap and
// returns what this rank needs to join its group (nothing for NoColor).
// bad is this rank's own argument error, sent so that every rank fails
// with it.
func (c *Comm) splitExchange(ctx context.Context, color, key int, bad error) (joinSpec, net.Listener, error) {
	c.enterCall(0)
	defer c.leaveCall()
	all, err := c.boot.AllGather(ctx, encodeSplitRecord(color, key, bad))
	if err != nil {
		return joinSpec{}, nil, fmt.Errorf("exchanging colors: %w", err)
	}
	recs := make([]splitRecord, len(all))
	for r, b := range all {
		if recs[r], err = decodeSplitRecord(b); err != nil {
			return joinSpec{}, nil, fmt.Errorf("%w: rank %d: %v", ErrMismatch, r, err)
		}
	}
	if bad != nil {
		return joinSpec{}, nil, bad
	}
	for r, x := range recs {
		if x.bad != "" {
			return joinSpec{}, nil, fmt.Errorf("%w: rank %d: %s", collectives.ErrInvalidArgument, r, x.bad)
		}
	}
	members := splitGroup(recs, color)
	me := slices.Index(members, c.rank)
	// The new rank 0 of each group makes its id; every rank takes part in
	// the step, so that none waits on a group it is not in.
	var offer []byte
	var ln net.Listener
	var id UniqueID
	var idErr error
	pairs := color != NoColor && len(members) > 1 && c.sameNode(members)
	if color != NoColor && me == 0 {
		id, ln, idErr = c.newChildID(len(members), pairs)
		offer = encodeSplitOffer(id, pairs, idErr)
	}
	offers, err := c.boot.AllGather(ctx, offer)
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return joinSpec{}, nil, fmt.Errorf("exchanging the new ids: %w", err)
	}
	if color == NoColor {
		return joinSpec{}, nil, nil
	}
	leader := members[0]
	if me != 0 {
		if id, pairs, err = decodeSplitOffer(offers[leader]); err != nil {
			return joinSpec{}, nil, &collectives.PeerError{Rank: leader, Cause: fmt.Errorf("the new rank 0 of color %d: %w", color, err)}
		}
	} else if idErr != nil {
		return joinSpec{}, nil, idErr
	}
	spec := joinSpec{nranks: len(members), rank: me, localRank: c.rescue.localRanks(members)[me], id: id, token: id.Token(), ln: ln, hub: c.rescue.hub}
	if pairs {
		// Still under the call gate: no other call of the parent passes
		// descriptors meanwhile.
		if me == 0 {
			if ln, err = c.sendPairs(ctx, members); err != nil {
				return joinSpec{}, nil, err
			}
			spec.ln = ln
		} else if spec.conn, err = c.takePair(ctx, leader); err != nil {
			return joinSpec{}, nil, err
		}
	}
	return spec, ln, nil
}

// splitGroup lists the parent ranks of color's group in their new order:
// by key, ties by parent rank.
func splitGroup(recs []splitRecord, color int) []int {
	if color == NoColor {
		return nil
	}
	var members []int
	for r, x := range recs {
		if x.color == int64(color) {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int {
		if recs[a].key != recs[b].key {
			if recs[a].key < recs[b].key {
				return -1
			}
			return 1
		}
		return a - b
	})
	return members
}

// newChildID makes a child's id: a fresh secret and, when the child has
// other ranks and does not meet over socket pairs, a listener on the
// parent's interface for its bootstrap.
func (c *Comm) newChildID(nranks int, pairs bool) (UniqueID, net.Listener, error) {
	ip := c.rescue.ip
	if nranks == 1 || pairs {
		// No rank will dial it: the address only has to be well formed.
		id, err := newUniqueIDAt(netip.AddrPortFrom(ip, 1))
		return id, nil, err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		return UniqueID{}, nil, fmt.Errorf("listening for the new communicator on %s: %w", ip, err)
	}
	id, err := newUniqueIDAt(ln.Addr().(*net.TCPAddr).AddrPort())
	if err != nil {
		_ = ln.Close()
		return UniqueID{}, nil, err
	}
	return id, ln, nil
}

// childSettings are the parent's settings with opts' non-zero fields
// applied: a child runs the parent's backend on the parent's device.
func (c *Comm) childSettings(opts Options) (settings, error) {
	s := c.set
	if s.log == nil { // a Comm not made by init (tests)
		s.log = c.log
		s.timeout, s.hbInterval = DefaultTimeout, DefaultHeartbeatInterval
	}
	if s.backend == BackendAuto && s.factory == nil && c.backendName != "" {
		s.backend = c.backendName // no second probe
	}
	if c.device >= 0 {
		s.device = Device(c.device)
	}
	if opts.Backend != "" {
		if err := checkBackend(opts.Backend); err != nil {
			return s, fmt.Errorf("%w: Options.Backend=%q: %v", collectives.ErrInvalidArgument, opts.Backend, err)
		}
		s.backend = opts.Backend
	}
	if opts.Device != nil {
		if *opts.Device < 0 {
			return s, fmt.Errorf("%w: Options.Device=%d", collectives.ErrInvalidArgument, *opts.Device)
		}
		s.device = opts.Device
	}
	switch {
	case opts.Timeout < 0:
		return s, fmt.Errorf("%w: Options.Timeout=%v", collectives.ErrInvalidArgument, opts.Timeout)
	case opts.Timeout > 0:
		s.timeout, s.timeoutSet = opts.Timeout, true
	}
	switch {
	case opts.HeartbeatInterval < 0:
		return s, fmt.Errorf("%w: Options.HeartbeatInterval=%v", collectives.ErrInvalidArgument, opts.HeartbeatInterval)
	case opts.HeartbeatInterval > 0:
		s.hbInterval = opts.HeartbeatInterval
	}
	if opts.Transport != "" {
		s.transport = opts.Transport
	}
	if opts.Algo != "" {
		s.algo = opts.Algo
	}
	if opts.Check {
		s.check = true
	}
	if opts.Logger != nil {
		s.log = opts.Logger
	}
	if opts.NewBackend != nil {
		s.factory = opts.NewBackend
	}
	return s, nil
}

// Split's messages over the parent's bootstrap. Each opens with a tag, so
// that a rank in another call (a collective's GOCCL_CHECK record, another
// Split step) is told apart from garbage.
//
//	record: "GSP1" | color i64 | key i64 | bad u8 | message (when bad)
//	offer:  "GSP2" | status u8 | id (status 1: dial it; 3: socket pairs) or message (status 2)
const (
	splitRecordTag = "GSP1"
	splitOfferTag  = "GSP2"
	splitRecordLen = 4 + 8 + 8 + 1
)

type splitRecord struct {
	color, key int64
	bad        string
}

func encodeSplitRecord(color, key int, bad error) []byte {
	b := append([]byte(nil), splitRecordTag...)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(color)))
	b = binary.BigEndian.AppendUint64(b, uint64(int64(key)))
	if bad == nil {
		return append(b, 0)
	}
	msg := strings.TrimPrefix(bad.Error(), collectives.ErrInvalidArgument.Error()+": ")
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return append(append(b, 1), msg...)
}

func decodeSplitRecord(b []byte) (splitRecord, error) {
	if len(b) < splitRecordLen || string(b[:4]) != splitRecordTag {
		if bytes.HasPrefix(b, []byte(splitOfferTag)) {
			return splitRecord{}, errors.New("is in another step of Split (did it call Split once more, or once less?)")
		}
		return splitRecord{}, fmt.Errorf("is not in Split (sent %d bytes of another call: does every rank call Split at this point?)", len(b))
	}
	r := splitRecord{color: int64(binary.BigEndian.Uint64(b[4:])), key: int64(binary.BigEndian.Uint64(b[12:]))}
	switch b[20] {
	case 0:
		if len(b) != splitRecordLen {
			return r, fmt.Errorf("%w: Split record of %d bytes", errMalformed, len(b))
		}
		if r.color < NoColor {
			return r, fmt.Errorf("%w: Split record with color %d", errMalformed, r.color)
		}
	case 1:
		r.bad = printable(b[splitRecordLen:])
		if r.bad == "" || len(r.bad) > maxMessage {
			r.bad = "bad arguments"
		}
	default:
		return r, fmt.Errorf("%w: Split record flag %d", errMalformed, b[20])
	}
	return r, nil
}

func encodeSplitOffer(id UniqueID, pairs bool, err error) []byte {
	b := append([]byte(nil), splitOfferTag...)
	if err != nil {
		msg := err.Error()
		if len(msg) > maxMessage {
			msg = msg[:maxMessage]
		}
		return append(append(b, 2), msg...)
	}
	status := byte(1)
	if pairs {
		status = 3
	}
	return append(append(b, status), id[:]...)
}

// decodeSplitOffer returns the offered id and whether the group meets
// over socket pairs.
func decodeSplitOffer(b []byte) (UniqueID, bool, error) {
	if len(b) < 5 || string(b[:4]) != splitOfferTag {
		return UniqueID{}, false, fmt.Errorf("%w: no id offered (%d bytes)", errMalformed, len(b))
	}
	switch b[4] {
	case 1, 3:
		id, err := uniqueIDFromBytes(b[5:])
		return id, b[4] == 3, err
	case 2:
		return UniqueID{}, false, errors.New(printable(b[5:]))
	}
	return UniqueID{}, false, fmt.Errorf("%w: offer status %d", errMalformed, b[4])
}
