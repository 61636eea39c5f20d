// Package onheap keeps Go memory whose address goes to goccl only as a
// uintptr on the heap.
//
// The compiler may place a slice that does not otherwise escape (a small
// make, a local array) on the goroutine's stack, and stacks move when they
// grow or shrink: a backend handed the old address then reads and writes
// memory the slice has left. Escape analysis does not follow a uintptr,
// so the conversion alone does not keep the slice on the heap, where Go
// never moves it. The typed calls of package comm and the tests' buffer
// helpers go through here.
package onheap
