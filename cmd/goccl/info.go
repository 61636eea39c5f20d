package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/transport/nvls"
)

// probeTimeout bounds the probe: driver loading and NVML queries do not
// normally block, but a wedged driver must not hang `goccl info`.
const probeTimeout = 60 * time.Second

// infoUsage is printed for -h and after a usage error, as run's and
// bench's are.
const infoUsage = `usage: goccl info [--json]

Prints what the runtime sees on this machine (CPU, NUMA nodes, its node id,
GPUs, their links and capabilities, the network ports between nodes and their
rates) and what it would choose: the transport per way of launching, the
algorithms the backend can run and the port each backend's traffic between
nodes takes (the link ceiling across nodes).

flags:
  --json   print the facts and choices as JSON
`

// infoMain prints what the runtime sees and would choose. A machine
// without GPUs is not a failure: it prints the host facts and exits 0.
func infoMain(args []string) int { return infoCmd(args, os.Stdout, os.Stderr) }

func infoCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goccl info", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	jsonOut := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, infoUsage)
			return 0 // as `goccl run -h` and `goccl bench -h`
		}
		fmt.Fprintf(stderr, "goccl info: %v\n%s", err, infoUsage)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl info: unexpected arguments %q\n%s", fs.Args(), infoUsage)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	facts, err := topology.ProbeSystem(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "goccl info: %v\n", err)
		return 1
	}
	if err := renderInfo(stdout, facts, *jsonOut, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "goccl info: %v\n", err)
		return 1
	}
	return 0
}

// infoChoice is the transport the runtime would pick for one way of
// launching, or why it could not pick one.
type infoChoice struct {
	Mode  string `json:"mode"`
	Ranks int    `json:"ranks"`
	collectives.Choice
	Error string `json:"error,omitempty"`
}

// infoReport is `goccl info --json`.
type infoReport struct {
	Facts              *topology.Facts `json:"facts"`
	Node               infoNode        `json:"node"`
	Choices            []infoChoice    `json:"choices"`
	Algorithms         []string        `json:"algorithms"`
	AlgorithmSelection string          `json:"algorithm_selection"`
	Network            infoNetwork     `json:"network"`
}

// infoNetwork is the ports traffic between nodes may take and the one
// each backend's network library would, under this environment: the
// rate the link ceiling across nodes is at most.
type infoNetwork struct {
	Ports    []topology.NetPort `json:"ports"`
	Warnings []string           `json:"warnings,omitempty"`
	Choices  []infoNetChoice    `json:"choices"`
}

type infoNetChoice struct {
	Backend string `json:"backend"` // "gpu", "host"
	Stack   string `json:"stack"`   // "NCCL", "UCX"
	topology.NetChoice
	Found bool `json:"found"`
}

// infoNetRoot is where sysfs is read for the network ports; tests point
// it at fake trees.
var infoNetRoot = "/sys"

// infoNode is this machine's node identity, as every rank computes it at
// init: ranks with equal ids are taken to share the machine.
type infoNode struct {
	ID    string `json:"id,omitempty"`   // the id's first 8 bytes in hex, as the logs print it
	From  string `json:"from,omitempty"` // what was hashed
	Error string `json:"error,omitempty"`
}

// infoNodeSource is what the node id is made of; tests replace the
// hostname and boot id.
var infoNodeSource = topology.OSNodeSource

const (
	modeSingle = "single_process"
	modePerGPU = "process_per_gpu"
	modeHost   = "host_backend"
)

// buildReport computes the choices for the facts under the environment
// getenv reads (GOCCL_TRANSPORT, GOCCL_ALGO, the NVLS gate's variables).
func buildReport(f *topology.Facts, getenv func(string) string) infoReport {
	gate := func() (bool, string) { return nvls.Gate(getenv) }
	forced := getenv("GOCCL_TRANSPORT")
	rep := infoReport{Facts: f}
	src := infoNodeSource
	src.Getenv = getenv // GOCCL_HOSTID
	if id, desc, err := topology.LocalNode(src); err != nil {
		rep.Node.Error = err.Error()
	} else {
		rep.Node = infoNode{ID: id.String(), From: desc}
	}
	choose := func(mode string, place collectives.Placement) {
		c := infoChoice{Mode: mode, Ranks: place.NRanks}
		ch, err := collectives.ChooseTransport(f, place, forced, gate)
		if err != nil {
			c.Error = err.Error()
		} else {
			c.Choice = ch
		}
		rep.Choices = append(rep.Choices, c)
	}
	if n := len(f.GPUs); n > 0 {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		choose(modeSingle, collectives.Placement{NRanks: n, SingleProcess: true, Devices: all})
		choose(modePerGPU, collectives.Placement{NRanks: n, Devices: all})
	} else {
		choose(modeHost, collectives.Placement{NRanks: 2})
	}

	// Without GPUs only the host backend can run: list what it runs.
	algos := collectives.Algorithms()
	if len(f.GPUs) == 0 {
		algos = []collectives.Algorithm{collectives.OneShot, collectives.TwoShot}
	}
	for _, a := range algos {
		rep.Algorithms = append(rep.Algorithms, string(a))
	}
	rep.Network = buildNetwork(infoNetRoot, getenv)
	rep.AlgorithmSelection = "chosen per call by collective, size and rank count"
	if v := getenv("GOCCL_ALGO"); v != "" {
		switch a, err := collectives.ParseAlgorithm(v); {
		case err != nil:
			rep.AlgorithmSelection = err.Error()
		case !slices.Contains(algos, a):
			rep.AlgorithmSelection = "GOCCL_ALGO=" + string(a) + " is a GPU algorithm: the host backend rejects it"
		default:
			rep.AlgorithmSelection = "forced by GOCCL_ALGO=" + string(a)
		}
	}
	return rep
}

// buildNetwork lists the ports under root and the one each backend would
// take between nodes. Where the settings name nothing and no RDMA port is
// active, a backend takes the interface of the ranks' bootstrap, known only
// at init: none here.
func buildNetwork(root string, getenv func(string) string) infoNetwork {
	ports, warns := topology.NetPorts(root)
	n := infoNetwork{Ports: ports, Warnings: warns, Choices: []infoNetChoice{}}
	if n.Ports == nil {
		n.Ports = []topology.NetPort{}
	}
	for _, b := range []struct {
		name  string
		stack topology.NetStack
	}{{"gpu", topology.NetNCCL}, {"host", topology.NetUCX}} {
		c, ok := topology.ChooseNetPort(ports, b.stack, getenv, "")
		n.Choices = append(n.Choices, infoNetChoice{Backend: b.name, Stack: b.stack.String(), NetChoice: c, Found: ok})
	}
	return n
}

// renderInfo writes the report as text or JSON.
func renderInfo(w io.Writer, f *topology.Facts, jsonOut bool, getenv func(string) string) error {
	if f == nil {
		return errors.New("no facts")
	}
	rep := buildReport(f, getenv)
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	ew := &errWriter{w: w}
	renderText(ew, rep)
	return ew.err
}

// errWriter keeps the first write error so the renderer stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func renderText(w io.Writer, rep infoReport) {
	f := rep.Facts
	c := f.CPU
	fmt.Fprintf(w, "CPU: %s (%s family %d model %d), %d physical / %d logical cores\n",
		orNA(c.Brand), orNA(c.Vendor), c.Family, c.Model, c.PhysicalCores, c.LogicalCores)
	fmt.Fprintf(w, "CPU features: %s\n", orNA(strings.Join(c.Features, " ")))
	if len(f.NUMA) == 0 {
		fmt.Fprintln(w, "NUMA: no nodes reported")
	}
	for _, n := range f.NUMA {
		fmt.Fprintf(w, "NUMA node %d: CPUs %s\n", n.ID, n.CPUList)
	}
	if rep.Node.Error != "" {
		fmt.Fprintf(w, "Node: unknown: %s\n", rep.Node.Error)
	} else {
		fmt.Fprintf(w, "Node: %s (from %s)\n", rep.Node.ID, rep.Node.From)
	}
	for _, warn := range f.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}

	if !f.HasGPUs() {
		fmt.Fprintln(w, f.NoGPUReason)
		renderChoices(w, rep)
		renderNetwork(w, rep.Network)
		return
	}

	fmt.Fprintf(w, "\nDriver: CUDA %s", orNA(f.DriverVersion))
	if f.NVMLDriver != "" {
		fmt.Fprintf(w, ", NVIDIA %s", f.NVMLDriver)
	}
	fmt.Fprintln(w)

	// The nvidia-smi topo -m view.
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for i := range f.GPUs {
		fmt.Fprintf(tw, "\tGPU%d", i)
	}
	fmt.Fprint(tw, "\tCPU Affinity\tNUMA Affinity\n")
	for i, g := range f.GPUs {
		fmt.Fprintf(tw, "GPU%d", i)
		for j := range f.GPUs {
			fmt.Fprintf(tw, "\t%s", f.Links[i][j].Label)
		}
		node := "N/A"
		if g.NUMANode >= 0 {
			node = fmt.Sprint(g.NUMANode)
		}
		fmt.Fprintf(tw, "\t%s\t%s\n", orNA(g.CPUList), node)
	}
	tw.Flush()
	fmt.Fprint(w, `
Legend:
  X     the GPU itself
  NV#   # NVLinks, direct or through NVSwitch
  PIX   PCIe, at most one PCIe switch
  PXB   PCIe, several PCIe switches, no host bridge
  PHB   PCIe, through a host bridge
  NODE  PCIe, between host bridges of one NUMA node
  SYS   PCIe, across NUMA nodes
`)
	if hasUnknownLink(f) {
		fmt.Fprintln(w, "  ?     unknown: NVML unavailable")
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprint(tw, "GPU\tName\tBus ID\tCC\tSMs\tMemory\tUVA\tIPC\tVMM\tPOSIX fd\tFabric\tMulticast\tNVSwitch links\n")
	for _, g := range f.GPUs {
		cp := g.Caps
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%.1f GiB\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n",
			g.Index, g.Name, g.BusID, g.ComputeCapability(), g.SMs, float64(g.MemoryBytes)/(1<<30),
			yesNo(cp.UVA), yesNo(cp.IPC), yesNo(cp.VMM), yesNo(cp.PosixFD), yesNo(cp.Fabric), yesNo(cp.Multicast),
			g.NVSwitchLinks)
	}
	tw.Flush()
	fmt.Fprintln(w, "(Multicast is the driver's attribute only; nothing multicast is created.)")
	for _, g := range f.GPUs {
		if g.Fabric != nil {
			fmt.Fprintf(w, "GPU%d fabric: state %s, clique %d, cluster %s\n", g.Index, g.Fabric.State, g.Fabric.CliqueID, g.Fabric.ClusterUUID)
		}
	}

	if len(f.GPUs) > 1 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprint(tw, "Pair\tLink\tBandwidth/dir\tP2P\tNative atomics\n")
		for i := range f.GPUs {
			for j := i + 1; j < len(f.GPUs); j++ {
				l, r := f.Links[i][j], f.Links[j][i]
				bw := "-"
				if l.BandwidthGBs > 0 {
					bw = fmt.Sprintf("%g GB/s", l.BandwidthGBs)
				}
				fmt.Fprintf(tw, "GPU%d-GPU%d\t%s\t%s\t%s\t%s\n", i, j, linkText(l), bw,
					both(l.P2P, r.P2P), both(l.Atomics, r.Atomics))
			}
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	renderChoices(w, rep)
	renderNetwork(w, rep.Network)
}

// renderNetwork writes the ports table and each backend's port between
// nodes.
func renderNetwork(w io.Writer, n infoNetwork) {
	fmt.Fprintln(w)
	if len(n.Ports) == 0 {
		fmt.Fprintln(w, "Network: no RDMA port or interface found (/sys/class/infiniband, /sys/class/net)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprint(tw, "Port\tKind\tInterfaces\tState\tRate\tBandwidth/dir\n")
		hidden := 0
		for _, p := range n.Ports {
			if p.Virtual && p.GBs <= 0 {
				hidden++ // bridges and veths: many on container hosts, none a link
				continue
			}
			kind, rate := "interface", p.Rate
			switch {
			case p.RDMA:
				kind = "RDMA " + orNA(p.LinkLayer)
			case p.GBs > 0:
				rate += " Mb/s"
			default:
				rate = "unknown" // no link, or a virtual interface
			}
			bw := "-"
			if p.GBs > 0 {
				bw = fmt.Sprintf("%g GB/s", p.GBs)
			}
			ifs := strings.Join(p.Netdevs, ",")
			if ifs == "" {
				ifs = "-"
			}
			state := orNA(p.State)
			if !p.Active {
				state += " (not used)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, kind, ifs, state, orNA(rate), bw)
		}
		tw.Flush()
		if hidden > 0 {
			fmt.Fprintf(w, "(%d virtual interface(s) of unknown rate left out; --json lists them)\n", hidden)
		}
	}
	for _, warn := range n.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	for _, c := range n.Choices {
		head := fmt.Sprintf("%s backend between nodes (%s)", c.Backend, c.Stack)
		const boot = "the bootstrap's interface"
		switch {
		case !c.Found && strings.HasSuffix(c.By, boot):
			why := strings.TrimSuffix(strings.TrimSuffix(c.By, boot), ", ")
			if why != "" {
				why = " (" + why + ")"
			}
			fmt.Fprintf(w, "%s: %s, known at init%s; its rate, where sysfs gives one, is the ceiling across nodes\n", head, boot, why)
		case !c.Found:
			fmt.Fprintf(w, "%s: no active port fits (%s): no ceiling across nodes\n", head, c.By)
		case c.GBs <= 0:
			fmt.Fprintf(w, "%s: %s, rate unknown (%s): no ceiling across nodes\n", head, c.Port.Name, c.By)
		default:
			fmt.Fprintf(w, "%s: %s, ceiling %g GB/s per direction (%s; %d active port(s) allowed)\n", head, c.Port.Name, c.GBs, c.By, c.Candidates)
		}
	}
}

// both reports a per-direction flag for a pair: yes, no, or one-way.
func both(ab, ba bool) string {
	switch {
	case ab && ba:
		return "yes"
	case !ab && !ba:
		return "no"
	case ab:
		return "one way (low to high)"
	}
	return "one way (high to low)"
}

func linkText(l topology.Link) string {
	switch l.Kind {
	case topology.LinkNVLink:
		return fmt.Sprintf("%d NVLinks, direct (%s)", l.NVLinks, l.Label)
	case topology.LinkNVSwitch:
		return fmt.Sprintf("%d NVLinks, through NVSwitch (%s)", l.NVLinks, l.Label)
	case topology.LinkPCIe:
		return "PCIe " + string(l.Path)
	}
	return "unknown"
}

func renderChoices(w io.Writer, rep infoReport) {
	var nvlsLine string
	for _, c := range rep.Choices {
		var head string
		switch c.Mode {
		case modeSingle:
			head = fmt.Sprintf("1 process driving all %d GPUs", c.Ranks)
		case modePerGPU:
			head = fmt.Sprintf("one process per GPU (%d ranks)", c.Ranks)
		case modeHost:
			head = "host backend (CPU ranks)"
		}
		if c.Error != "" {
			fmt.Fprintf(w, "%s: no transport: %s\n", head, c.Error)
			continue
		}
		fmt.Fprintf(w, "%s: transport %s (%s)\n", head, c.Transport, c.Reason)
		if c.Mode != modeSingle {
			nvlsLine = c.NVLSReason
		}
	}
	if nvlsLine != "" && rep.Facts.HasGPUs() {
		fmt.Fprintf(w, "NVLS: %s\n", nvlsLine)
	}
	fmt.Fprintf(w, "algorithms: %s; %s\n", strings.Join(rep.Algorithms, ", "), rep.AlgorithmSelection)
}

func hasUnknownLink(f *topology.Facts) bool {
	for _, row := range f.Links {
		for _, l := range row {
			if l.Kind == topology.LinkUnknown {
				return true
			}
		}
	}
	return false
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}
