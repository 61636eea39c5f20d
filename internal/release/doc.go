// Package release stores a word with release ordering only: every load and
// store before it is visible to a thread that sees the new value, and
// nothing more. sync/atomic's stores are sequentially consistent, which
// on x86-64 is an XCHG, a full barrier that waits for the store buffer to
// drain; x86-64 orders plain stores after earlier loads and stores
// already, so there a release store is one MOV. It suits a single writer
// publishing what it wrote (a lock's release, a ring's newest entry), not
// a store that must be ordered before a later load (a Dekker-style
// handshake, a sleeper count checked after a wake-up word).
//
// Readers use sync/atomic's loads. Under the race detector, and on other
// architectures, the stores are sync/atomic's.
package release
