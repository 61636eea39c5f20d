// Command goccl is the user's entry point: run launches multi-rank jobs,
// bench measures collectives in nccl-tests' format, plot draws saved
// bench reports, info shows what the runtime sees and would choose, model
// predicts the cost of collectives across nodes, trace and dump read the
// ranks' flight records.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: goccl <command> [arguments]

commands:
  run    -np N [--tag-output] [--timeout D] prog args...   start N local ranks
  bench  <all_reduce|broadcast|reduce_scatter|all_gather|reduce> [flags]
  plot   -o FILE.png RUN.json [PEER.json...]                busbw against size from saved reports
  info   [--json]                                            devices, links, choices
  model  [--nodes LIST] [--sizes LIST] [--markdown] ...      predicted cost across nodes (arithmetic)
  version                                                    goccl's version and Go's
  trace  [-o trace.json] [-png out.png] rank*.json           flight records as a Chrome trace and a timeline
  dump   PID                                                 a running rank's flight record (SIGUSR1)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var code int
	switch cmd {
	case "run":
		code = runMain(args)
	case "bench":
		code = benchMain(args)
	case "plot":
		code = plotMain(args)
	case "info":
		code = infoMain(args)
	case "model":
		code = modelMain(args)
	case "version", "--version":
		code = versionMain(args, os.Stdout, os.Stderr)
	case "trace":
		code = traceMain(args)
	case "dump":
		code = dumpMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "goccl: unknown command %q\n%s", cmd, usage)
		code = 2
	}
	os.Exit(code)
}
