// Package faults holds goccl's reliability scenarios (DESIGN §7): ranks
// killed, stopped or closed early mid-collective, ranks lost during init,
// aborts racing waits, hostile bootstrap traffic, mismatched parameters and
// calls, two jobs side by side, forged fd messages, create/destroy cycles
// and exhausted resources. Each scenario is a test with generous time
// bounds (they catch a hang, not a slow machine); the measured times are
// logged as figures. They run on the host backend in CI. Multi-process
// scenarios re-execute the test binary as ranks (see child_test.go),
// directly or under the launcher.
//
// `go test ./tests/faults` is the CI run (a few minutes on 2 cores);
// `go test ./tests/faults -long` (or GOCCL_FAULTS_LONG=1) runs the long
// variants (1,000 aborts, 10,000 create/destroy cycles).
//
// What each scenario shows, and the worst time to error measured on a
// loaded 2-core machine without GPU (host backend, 3 ranks unless said):
//
//	scenario                                 test                            worst time to error
//	1  SIGKILL mid-collective                TestKillDuringCollective        8 ms (bound 10 s)
//	   ... under launcher.Run, goccl run     TestKillUnderLauncher/GocclRun  2 ms; the launcher names the killed rank
//	2  SIGSTOP, heartbeat 200 ms             TestStopDuringCollective        1.0 s (5 missed beats)
//	   SIGSTOP, collective timeout 3 s       TestStopDuringCollective        3.0 s; the resumed rank names itself
//	                                                                         ("this rank stalled for 2.0 s") within 1 ms
//	   ... under launcher.Run                TestStopUnderLauncher           1.0 s; the launcher reports the stopped
//	                                                                         rank (killed after the grace), not a survivor
//	3  death during init                     TestDeathDuringInit             15 ms (never joins: the 3 s init timeout)
//	4  Abort while waiting (200 rounds)      TestAbortWhileWaiting           1.2 ms from Abort to return
//	5  strangers on the bootstrap port       TestHostileBootstrapTraffic     dropped in 0.8 s (the hello timeout);
//	                                                                         the job forms and computes
//	   another user's hellos with the job's  TestStrangerWithMagicCannot-    refused and told why in 16 ms; the job
//	   magic (duplicate rank, version, size)   EndInit (as root)             forms (the init used to fail)
//	   the old fd-socket names squatted      TestFDSocketSquatter            the job forms (names carry rank 0's nonce)
//	   a rank with another job's magic       TestWrongMagicRankHearsWhy      its init timeout says "refused this
//	                                                                         connection: wrong magic"
//	6  nranks, duplicate rank, version       TestInitMismatch                23 ms, every rank
//	   world size under torchrun, torch-     TestWorldSizeMismatch           15 ms, both ranks: "rank 1 says nranks=3,
//	   elastic, goccl run, mpirun variables                                  rank 0 has 2"
//	   arguments under GOCCL_CHECK           TestCheckMismatch               immediate, every rank
//	7  two jobs side by side                 TestTwoJobsAtOnce               no interference
//	8  forged fd-socket messages             TestForeignFDSender             dropped; the job unharmed
//	   6,000 of them, two senders (one of    TestFDSocketFlood               4 log lines in all, every drop counted
//	   another user when run as root)                                        (was a line per message)
//	9  create/destroy cycles                 TestCreateDestroyCycles         nothing leaked
//	10 low fd limit, unmappable segment      TestLowFDLimit, ...Segment      a clean error, nothing leaked
//	11 a rank closes with calls outstanding  TestPeerClosesEarly(+Launcher)  6 ms from its Close, every survivor:
//	   on others (one call fewer, exit 0)                                    "peer closed its communicator after
//	                                                                         call #19 ... (rank 0 is in call #20)";
//	                                                                         a later call fails before launching, on
//	                                                                         any backend (comm's TestCallAfterPeerClosed)
//	12 a call that goes nowhere on one rank  TestCallNumbers                 2.3 ms from the odd call, every rank:
//	   (count 0, rejected arguments)                                         "rank 1 is in call #7 (...), rank 0 in
//	                                                                         #6 (...)"; a skipped call: the surplus
//	                                                                         call fails when the skipper closes
//
// Before these scenarios were fixed, 11 waited out the collective timeout
// (5 minutes by default), 12 gave wrong results silently and then hung,
// the world-size mismatch under torchrun's variables waited out the 60 s
// init timeout, a resumed stopped rank, like the launcher, blamed a
// healthy peer, another user's process knowing the magic could end the
// init, and a flood of forged fd messages wrote a log line each.
package faults
