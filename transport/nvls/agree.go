package nvls

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// agree is the collective status check that follows every risky phase:
// each rank contributes its own outcome (and, when it succeeded, a small
// payload), and every rank returns the same verdict. This is what lets all
// ranks fall back together instead of some holding a half-built multicast
// team while others have given up.
//
// Wire form of one contribution: byte 0 is 0 (ok) or 1 (failed). Ok is
// followed by the payload; failed by the step name, a NUL byte, and the
// error text.
//
// It returns every rank's payload on success. On failure it returns the
// local error when this rank failed, else a StepError naming the first
// failing rank, wrapping ErrPeerFailed.
func agree(ctx context.Context, b transport.Bootstrap, local *StepError, payload []byte) ([][]byte, error) {
	var msg []byte
	if local == nil {
		msg = append([]byte{0}, payload...)
	} else {
		msg = append([]byte{1}, local.Step...)
		msg = append(msg, 0)
		msg = append(msg, local.Err.Error()...)
	}
	all, err := b.AllGather(ctx, msg)
	if local != nil {
		return nil, local
	}
	if err != nil {
		return nil, stepErr(b.Rank(), StepExchange, err)
	}
	if len(all) != b.Size() {
		return nil, stepErr(b.Rank(), StepExchange, fmt.Errorf("allgather returned %d contributions for %d ranks", len(all), b.Size()))
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		if len(m) == 0 {
			return nil, stepErr(b.Rank(), StepExchange, fmt.Errorf("empty status from rank %d", r))
		}
		if m[0] != 0 {
			step, text := splitStatus(m[1:])
			return nil, stepErr(r, step, fmt.Errorf("%w: %s", ErrPeerFailed, text))
		}
		out[r] = m[1:]
	}
	return out, nil
}

func splitStatus(m []byte) (Step, string) {
	for i, c := range m {
		if c == 0 {
			return Step(m[:i]), string(m[i+1:])
		}
	}
	return Step(m), ""
}

// sizeFacts is the payload of the first agreement: what each rank was
// asked for and what its device requires.
type sizeFacts struct {
	size, mcGran, vmmGran uint64
}

func (f sizeFacts) marshal() []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint64(b[0:], f.size)
	binary.LittleEndian.PutUint64(b[8:], f.mcGran)
	binary.LittleEndian.PutUint64(b[16:], f.vmmGran)
	return b
}

func unmarshalSizeFacts(b []byte) (sizeFacts, error) {
	if len(b) != 24 {
		return sizeFacts{}, fmt.Errorf("size facts of %d bytes, want 24", len(b))
	}
	return sizeFacts{
		size:    binary.LittleEndian.Uint64(b[0:]),
		mcGran:  binary.LittleEndian.Uint64(b[8:]),
		vmmGran: binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

// agreedLayout turns every rank's facts into the one size and alignment
// all ranks use: the requested sizes must match, and the size is rounded up
// to a common multiple of every rank's multicast and VMM granularity.
func agreedLayout(all [][]byte) (size, align uint64, err error) {
	var want uint64
	align = 1
	for r, p := range all {
		f, err := unmarshalSizeFacts(p)
		if err != nil {
			return 0, 0, fmt.Errorf("rank %d: %w", r, err)
		}
		if r == 0 {
			want = f.size
		} else if f.size != want {
			return 0, 0, fmt.Errorf("%w: rank %d asks for %d bytes, rank 0 for %d", ErrConfig, r, f.size, want)
		}
		for _, g := range []uint64{f.mcGran, f.vmmGran} {
			if align, err = lcm(align, g); err != nil {
				return 0, 0, fmt.Errorf("rank %d: %w", r, err)
			}
		}
	}
	size, err = roundUp(want, align)
	return size, align, err
}

var errOverflow = errors.New("nvls: size overflows uint64")

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b uint64) (uint64, error) {
	if a == 0 || b == 0 {
		return 0, fmt.Errorf("%w: zero granularity", ErrConfig)
	}
	q := a / gcd(a, b)
	if q > ^uint64(0)/b {
		return 0, errOverflow
	}
	return q * b, nil
}

func roundUp(n, g uint64) (uint64, error) {
	if g == 0 {
		return 0, fmt.Errorf("%w: zero granularity", ErrConfig)
	}
	r := n % g
	if r == 0 {
		return n, nil
	}
	if n > ^uint64(0)-(g-r) {
		return 0, errOverflow
	}
	return n + (g - r), nil
}
