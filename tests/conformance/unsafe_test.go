package main

import "unsafe"

// ptrOf turns a host buffer address (mmap'd memory, outside the Go heap)
// back into a pointer for the fault-injecting test communicator.
func ptrOf(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
