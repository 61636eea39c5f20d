package recorder

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Kind names a recorded call. The first five are collectives.Collective's
// values.
type Kind uint8

const (
	AllReduce     Kind = iota // collectives.AllReduce
	Broadcast                 // collectives.Broadcast
	Reduce                    // collectives.Reduce
	AllGather                 // collectives.AllGather
	ReduceScatter             // collectives.ReduceScatter
	Send                      // a group of one Send
	Recv                      // a group of one Recv
	Group                     // an application's group of calls
	AllToAll                  // Comm.AllToAll's group
	AllToAllv                 // Comm.AllToAllv's group
	Gather                    // Comm.Gather's group
	Scatter                   // Comm.Scatter's group
	numKinds
)

var kindNames = [numKinds]string{"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
	"Send", "Recv", "Group", "AllToAll", "AllToAllv", "Gather", "Scatter"}

// String gives the kind's name ("AllReduce", "Send", ...).
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// ParseKind is String's inverse.
func ParseKind(s string) (Kind, bool) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), true
		}
	}
	return 0, false
}

// groupKinds maps a group's kind to the call it stands for.
var groupKinds = [...]Kind{collectives.PlainGroup: Group, collectives.AllToAllGroup: AllToAll,
	collectives.AllToAllvGroup: AllToAllv, collectives.GatherGroup: Gather, collectives.ScatterGroup: Scatter}

// State is where a call is.
type State uint8

const (
	Empty    State = iota // an unused slot
	Enqueued              // handed to the device, not known to have started
	Started               // running
	Finished              // returned without error
	Failed                // returned an error
)

var stateNames = [...]string{"empty", "enqueued", "started", "finished", "failed"}

// String gives the state's name ("started", ...).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// InProgress reports whether a rank in this state has entered the call
// and not come out of it well.
func (s State) InProgress() bool { return s == Enqueued || s == Started || s == Failed }

func parseState(s string) State {
	for i, n := range stateNames {
		if n == s {
			return State(i)
		}
	}
	return Empty
}

// typeNames spells types as Go does (float32, not nccl-tests' float): the
// records are read by people debugging Go programs.
var typeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16",
	"float8e4m3", "float8e5m2"}

func typeName(t collectives.DataType) string {
	if t >= 0 && int(t) < len(typeNames) {
		return typeNames[t]
	}
	return ""
}

// busFactor is nccl-tests' correction from algorithm to bus bandwidth for
// a call of kind on n ranks: the share of the data that crosses links.
func busFactor(k Kind, n int) float64 {
	f := float64(n)
	switch k {
	case AllReduce:
		return 2 * (f - 1) / f
	case AllGather, ReduceScatter, AllToAll, AllToAllv, Gather, Scatter:
		return (f - 1) / f
	}
	return 1
}
