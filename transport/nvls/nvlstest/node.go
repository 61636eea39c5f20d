package nvlstest

import (
	"os"
	"sync"

	"github.com/goccl/goccl/internal/cuda"
)

// Node is one node's worth of fake driver state shared by every rank's
// Driver: multicast objects, memory, reservations. It checks the rules the
// real driver enforces (or that goccl relies on), so that a wrong order
// fails a test instead of passing silently.
type Node struct {
	mu      sync.Mutex
	mcGran  uint64 // recommended multicast granularity
	vmmGran uint64 // minimum allocation granularity
	next    uint64
	handles map[cuda.MemHandle]*Object // live handles
	byInode map[uint64]*Object         // exported objects, by the fd's inode
	res     map[cuda.DevicePtr]*reservation
	created []*Object // every multicast object made
	mcCalls int       // Multicast* calls on every rank
}

// Object is a multicast object or a piece of device memory. Tests read
// the multicast fields of Created's objects once every rank is done.
type Object struct {
	MC       bool
	Size     uint64
	Want     uint32                 // multicast: NumDevices
	Devices  map[cuda.Device]bool   // multicast: added devices
	Bindings map[cuda.Device]uint64 // multicast: bound size, by device
	dev      cuda.Device            // memory: its device
	bound    bool                   // memory: bound to a multicast object
	mapped   int
}

type reservation struct {
	size   uint64
	mapped *Object
}

// NewNode returns an empty node whose driver reports mcGran as the
// recommended multicast granularity and vmmGran as the allocation one.
func NewNode(mcGran, vmmGran uint64) *Node {
	return &Node{
		mcGran: mcGran, vmmGran: vmmGran, next: 1 << 40,
		handles: map[cuda.MemHandle]*Object{},
		byInode: map[uint64]*Object{},
		res:     map[cuda.DevicePtr]*reservation{},
	}
}

// Live counts what is still allocated: handles, reservations, mappings,
// bindings. All must be zero after every test.
func (n *Node) Live() (handles, reservations, mappings, bindings int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.res {
		if r.mapped != nil {
			mappings++
		}
	}
	for _, o := range n.created {
		bindings += len(o.Bindings)
	}
	return len(n.handles), len(n.res), mappings, bindings
}

// Created returns every multicast object made so far, in order.
func (n *Node) Created() []*Object {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Object(nil), n.created...)
}

// MulticastCalls counts the Multicast* calls made on every rank.
func (n *Node) MulticastCalls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mcCalls
}

// IsMulticast reports whether h is a live multicast handle.
func (n *Node) IsMulticast(h cuda.MemHandle) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.handles[h]
	return ok && o.MC
}

// newHandle names o with a fresh handle; n.mu is held.
func (n *Node) newHandle(o *Object) cuda.MemHandle {
	n.next++
	h := cuda.MemHandle(n.next)
	n.handles[h] = o
	return h
}

// CountFDs returns how many descriptors this process holds, -1 when
// /proc/self/fd cannot be read; tests compare it before and after.
func CountFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
