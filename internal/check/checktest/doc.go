// Package checktest provides an in-process fake communicator for testing
// the benchmark and the conformance program without a backend: N ranks as
// goroutines over host buffers, each collective computed in the element
// type's own Go arithmetic (independently of package check's reference),
// with optional fault injection.
package checktest
