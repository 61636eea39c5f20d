// Package vmm reaches peers' memory across processes with the virtual
// memory management API: cuMemCreate allocations exported as POSIX file
// descriptors, passed over Unix sockets, imported and mapped by each peer.
package vmm
