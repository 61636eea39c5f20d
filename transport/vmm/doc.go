// Package vmm reaches peers' memory across processes with the virtual
// memory management API: cuMemCreate allocations exported as POSIX file
// descriptors, passed over Unix sockets, imported and mapped by each peer.
//
// Register shares a buffer inside one of the Mapper's own Allocs as a view
// of that Alloc. VMM cannot export memory it did not create, so ordinary
// cuMemAlloc memory (a framework's tensors, say) is registered through
// legacy CUDA IPC handles instead, by a transport/ipc Mapper over the same
// bootstrap. The ranks agree on the route first: all views, or all such
// foreign memory; a mix fails on every rank with cuda.ErrNotSupported.
package vmm
