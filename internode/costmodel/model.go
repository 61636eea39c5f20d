package costmodel

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by every error about a bad system, size or name.
var ErrInvalid = errors.New("costmodel: invalid argument")

// DefaultNVLinkGBs is an H100's or H200's NVLink bandwidth per GPU and
// direction: 18 NVLink4 links of 25 GB/s (topology.NVLinkGBs), through
// NVSwitch to any peer.
const DefaultNVLinkGBs = 18 * 25.0

// Collective is a collective the model covers.
type Collective int

// The collectives, in nccl-tests' order.
const (
	AllReduce Collective = iota
	ReduceScatter
	AllGather
	Broadcast
)

var collectiveNames = [...]string{"all_reduce", "reduce_scatter", "all_gather", "broadcast"}

// Collectives lists every collective the model covers.
var Collectives = []Collective{AllReduce, ReduceScatter, AllGather, Broadcast}

func (c Collective) String() string {
	if c < 0 || int(c) >= len(collectiveNames) {
		return fmt.Sprintf("Collective(%d)", int(c))
	}
	return collectiveNames[c]
}

// ParseCollective reads nccl-tests' name of a collective.
func ParseCollective(s string) (Collective, error) {
	for i, n := range collectiveNames {
		if s == n {
			return Collective(i), nil
		}
	}
	return 0, fmt.Errorf("%w: collective %q: want one of all_reduce, reduce_scatter, all_gather, broadcast", ErrInvalid, s)
}

// BusFactor is nccl-tests' busbw / algbw for n ranks.
func (c Collective) BusFactor(n int) float64 {
	f := float64(n-1) / float64(n)
	switch c {
	case AllReduce:
		return 2 * f
	case Broadcast:
		return 1
	}
	return f
}

// Schedule is how a call's bytes cross the nodes.
type Schedule int

// The schedules: one flat ring, or goccl's hierarchical legs with the rail
// leg as a ring, a double binary tree, or a direct exchange.
const (
	FlatRing Schedule = iota
	HierRing
	HierTree
	HierDirect
)

// Schedules lists every schedule the model covers.
var Schedules = []Schedule{FlatRing, HierRing, HierTree, HierDirect}

var scheduleNames = [...]string{"flat", "ring", "tree", "direct"}
var scheduleLabels = [...]string{"flat ring", "hier., rail ring", "hier., rail tree", "hier., rail direct"}

// String is the schedule's flag spelling.
func (s Schedule) String() string {
	if s < 0 || int(s) >= len(scheduleNames) {
		return fmt.Sprintf("Schedule(%d)", int(s))
	}
	return scheduleNames[s]
}

// Label is the schedule as a table names it.
func (s Schedule) Label() string {
	if s < 0 || int(s) >= len(scheduleLabels) {
		return s.String()
	}
	return scheduleLabels[s]
}

// ParseSchedule reads a schedule's flag spelling.
func ParseSchedule(s string) (Schedule, error) {
	for i, n := range scheduleNames {
		if s == n {
			return Schedule(i), nil
		}
	}
	return 0, fmt.Errorf("%w: schedule %q: want one of flat, ring, tree, direct", ErrInvalid, s)
}

// System is the machines: Nodes nodes of GPUs GPUs each.
type System struct {
	Nodes, GPUs int
	NVLinkGBs   float64       // GB/s per GPU and direction inside a node
	NICs        int           // per node
	NICGbps     float64       // line rate of one NIC, Gb/s per direction
	NVLinkStep  time.Duration // latency of one step inside a node
	NetStep     time.Duration // latency of one step between nodes
}

// Ranks is the number of GPUs in all.
func (s System) Ranks() int { return s.Nodes * s.GPUs }

// NICGBs is one GPU's share of its node's NICs, GB/s per direction.
func (s System) NICGBs() float64 { return float64(s.NICs) * s.NICGbps / 8 / float64(s.GPUs) }

// Validate names the first field that cannot describe machines.
func (s System) Validate() error {
	switch {
	case s.Nodes < 1:
		return fmt.Errorf("%w: nodes %d: at least 1", ErrInvalid, s.Nodes)
	case s.GPUs < 1:
		return fmt.Errorf("%w: GPUs per node %d: at least 1", ErrInvalid, s.GPUs)
	case s.Ranks() < 2:
		return fmt.Errorf("%w: 1 node of 1 GPU: a collective needs 2 ranks", ErrInvalid)
	case !(s.NVLinkGBs > 0):
		return fmt.Errorf("%w: NVLink bandwidth %g GB/s: must be positive", ErrInvalid, s.NVLinkGBs)
	case s.Nodes > 1 && s.NICs < 1:
		return fmt.Errorf("%w: NICs per node %d: nodes need at least 1", ErrInvalid, s.NICs)
	case s.Nodes > 1 && !(s.NICGbps > 0):
		return fmt.Errorf("%w: NIC rate %g Gb/s: must be positive", ErrInvalid, s.NICGbps)
	case s.NVLinkStep < 0 || s.NetStep < 0:
		return fmt.Errorf("%w: step latency %v / %v: must not be negative", ErrInvalid, s.NVLinkStep, s.NetStep)
	}
	return nil
}

// Link is what a leg's bytes cross.
type Link int

// The links: NVLink inside a node, a NIC between nodes.
const (
	NVLink Link = iota
	NIC
)

func (l Link) String() string {
	if l == NIC {
		return "NIC"
	}
	return "NVLink"
}

// Leg is one part of a schedule, on one kind of link.
type Leg struct {
	Name  string // short: "intra RS", "rail AR", ...
	Link  Link
	Bytes float64 // sent (and received) by the busiest GPU
	Steps int     // latency steps
	Rate  float64 // GB/s per GPU and direction
	Step  time.Duration
}

// WireSeconds is the leg's bytes at the link's line rate.
func (l Leg) WireSeconds() float64 { return l.Bytes / (l.Rate * 1e9) }

// LatencySeconds is the leg's steps times the link's step latency.
func (l Leg) LatencySeconds() float64 { return float64(l.Steps) * l.Step.Seconds() }

// Seconds is the leg alone: wire time plus latency.
func (l Leg) Seconds() float64 { return l.WireSeconds() + l.LatencySeconds() }

// Prediction is one call's cost on one system under one schedule.
type Prediction struct {
	System     System
	Collective Collective
	Schedule   Schedule
	Size       int64 // bytes, nccl-tests' size (the whole buffer)
	Legs       []Leg
	// Concurrent: the legs run at once (a flat ring's links); else one
	// after another (goccl's hierarchical legs).
	Concurrent bool
	Note       string // a schedule that does not apply and what ran instead
}

// Seconds is the call's time: concurrent legs take the slowest leg's wire
// time, sequential ones the sum of theirs; every step's latency adds.
func (p Prediction) Seconds() float64 {
	if p.Concurrent {
		return p.OverlappedSeconds()
	}
	var t float64
	for _, l := range p.Legs {
		t += l.Seconds()
	}
	return t
}

// OverlappedSeconds is the bound with every leg overlapped: each link
// carries its legs' bytes at once at line rate, the step latencies add.
func (p Prediction) OverlappedSeconds() float64 {
	var wire [2]float64
	var lat float64
	for _, l := range p.Legs {
		wire[l.Link] += l.WireSeconds()
		lat += l.LatencySeconds()
	}
	return max(wire[NVLink], wire[NIC]) + lat
}

// LinkBytes is what the busiest GPU sends over one kind of link in all.
func (p Prediction) LinkBytes(k Link) float64 {
	var b float64
	for _, l := range p.Legs {
		if l.Link == k {
			b += l.Bytes
		}
	}
	return b
}

// AlgBW is nccl-tests' algbw, size / time, in GB/s.
func (p Prediction) AlgBW() float64 { return float64(p.Size) / p.Seconds() / 1e9 }

// BusBW is nccl-tests' busbw in GB/s.
func (p Prediction) BusBW() float64 {
	return p.AlgBW() * p.Collective.BusFactor(p.System.Ranks())
}

// OverlappedBusBW is busbw at OverlappedSeconds.
func (p Prediction) OverlappedBusBW() float64 {
	return float64(p.Size) / p.OverlappedSeconds() / 1e9 * p.Collective.BusFactor(p.System.Ranks())
}

// Predict models one call of size bytes.
func Predict(sys System, c Collective, sch Schedule, size int64) (Prediction, error) {
	if err := sys.Validate(); err != nil {
		return Prediction{}, err
	}
	if size < 1 {
		return Prediction{}, fmt.Errorf("%w: size %d: at least 1 byte", ErrInvalid, size)
	}
	if c < 0 || int(c) >= len(collectiveNames) {
		return Prediction{}, fmt.Errorf("%w: %v", ErrInvalid, c)
	}
	if sch < 0 || int(sch) >= len(scheduleNames) {
		return Prediction{}, fmt.Errorf("%w: %v", ErrInvalid, sch)
	}
	p := Prediction{System: sys, Collective: c, Schedule: sch, Size: size}
	if sch == FlatRing {
		flat(&p)
	} else {
		hierarchical(&p)
	}
	return p, nil
}

// add appends a leg that moves bytes or takes steps; an empty one (no
// second node, no second GPU) is left out.
func (p *Prediction) add(name string, k Link, bytes float64, steps int) {
	if bytes == 0 && steps == 0 {
		return
	}
	l := Leg{Name: name, Link: k, Bytes: bytes, Steps: steps, Rate: p.System.NVLinkGBs, Step: p.System.NVLinkStep}
	if k == NIC {
		l.Rate, l.Step = p.System.NICGBs(), p.System.NetStep
	}
	p.Legs = append(p.Legs, l)
}

// flat is one ring over all n ranks. Each rank sends F·S in all (F: the
// collective's ring factor); with the rings spread evenly over a node's
// GPUs and NICs, 1/G of a GPU's ring traffic leaves the node on its share
// of the NICs and the rest goes over NVLink. Latency: a piece of data
// makes its way hop by hop along the ring (2(n-1) hops for AllReduce, n-1
// for the others), each hop costing its link's step latency; the piece
// that crosses the most node boundaries decides: 2N of its hops for
// AllReduce, N for ReduceScatter and AllGather, N-1 for a chain from the
// root (fewer when the ring has fewer hops).
func flat(p *Prediction) {
	sys, s := p.System, float64(p.Size)
	n, g, nodes := sys.Ranks(), float64(sys.GPUs), sys.Nodes
	var f float64
	hops, netHops := n-1, nodes
	switch p.Collective {
	case AllReduce:
		f, hops, netHops = 2*float64(n-1)/float64(n), 2*(n-1), 2*nodes
	case ReduceScatter, AllGather:
		f = float64(n-1) / float64(n)
	case Broadcast:
		f, netHops = 1, nodes-1 // a pipelined chain: every rank but the last forwards S
	}
	p.Concurrent = true
	if nodes == 1 {
		p.add("ring", NVLink, f*s, hops)
		return
	}
	netHops = min(netHops, hops)
	p.add("NVLink hops", NVLink, f*s*(1-1/g), hops-netHops)
	p.add("NIC hops", NIC, f*s/g, netHops)
}

// hierarchical is goccl's schedule across nodes: legs inside the node and
// along the rails, one after another.
func hierarchical(p *Prediction) {
	sys, s := p.System, float64(p.Size)
	g := float64(sys.GPUs)
	intra := s * (g - 1) / g // a reduce-scatter's or all-gather's bytes inside the node
	shard := s / g           // what one rail carries
	switch p.Collective {
	case AllReduce:
		p.add("intra RS", NVLink, intra, sys.GPUs-1)
		p.rail("rail AR", shard)
		p.add("intra AG", NVLink, intra, sys.GPUs-1)
	case ReduceScatter:
		p.add("intra RS", NVLink, intra, sys.GPUs-1)
		p.rail("rail RS", shard)
	case AllGather:
		p.rail("rail AG", shard)
		p.add("intra AG", NVLink, intra, sys.GPUs-1)
	case Broadcast:
		// The root's rail carries all of S; a chain inside each node
		// forwards it.
		p.rail("rail bcast", s)
		if sys.GPUs > 1 {
			p.add("intra bcast", NVLink, s, sys.GPUs-1)
		}
	}
}

// rail adds the leg across the nodes: d bytes per GPU along its rail of N
// GPUs, one per node.
func (p *Prediction) rail(name string, d float64) {
	sys := p.System
	n := sys.Nodes
	if n == 1 {
		return
	}
	nf := float64(n)
	sch := p.Schedule
	if sch == HierTree && p.Collective != AllReduce {
		// NCCL builds trees for AllReduce only.
		p.Note = "tree: " + p.Collective.String() + " runs the rail as a ring"
		sch = HierRing
	}
	switch p.Collective {
	case AllReduce:
		switch sch {
		case HierRing:
			p.add(name+" (ring)", NIC, 2*(nf-1)/nf*d, 2*(n-1))
		case HierTree:
			t := doubleTree(n)
			// Each tree carries half; a rank sends and receives half of d
			// once per tree edge it has (up in the reduce, down in the
			// broadcast).
			p.add(name+" (tree)", NIC, d/2*float64(t.maxEdges), 2*t.depth)
		case HierDirect:
			p.add(name+" (direct)", NIC, (nf-1)*d, 1)
		}
	case ReduceScatter, AllGather:
		switch sch {
		case HierRing:
			p.add(name+" (ring)", NIC, (nf-1)/nf*d, n-1)
		case HierDirect:
			p.add(name+" (direct)", NIC, (nf-1)/nf*d, 1)
		}
	case Broadcast:
		switch sch {
		case HierRing:
			p.add(name+" (chain)", NIC, d, n-1)
		case HierDirect:
			p.add(name+" (direct)", NIC, (nf-1)*d, 1)
		}
	}
}
