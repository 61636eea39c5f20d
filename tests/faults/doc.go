// Package faults holds goccl's reliability scenarios (DESIGN §7):
// ranks killed or stopped mid-collective, ranks lost during init, aborts
// racing waits, hostile bootstrap traffic, mismatched parameters, two jobs
// side by side, forged fd messages, create/destroy cycles and exhausted
// resources. Each scenario is a test with explicit time bounds, run on the
// host backend in CI. Multi-process scenarios re-execute the test binary
// as ranks (see child_test.go), directly or under the launcher.
//
// `go test ./tests/faults` is the CI run (a few minutes on 2 cores);
// `go test ./tests/faults -long` (or GOCCL_FAULTS_LONG=1) runs the long
// variants (1,000 aborts, 10,000 create/destroy cycles).
package faults
