// Package recorder tests the flight recorder end to end: jobs of four host
// ranks under the launcher in which one rank skips a collective, calls
// another one, or is stopped, and in which every survivor's error and goccl
// run's summary must name that rank and the call.
package recorder
