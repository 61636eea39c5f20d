package topology

import (
	"path"
	"strconv"
	"strings"
)

// NetStack is the library that carries a backend's traffic between
// nodes, whose settings say which ports it takes.
type NetStack int

const (
	// NetNCCL: the GPU backend's, NCCL loaded at run time. NCCL_IB_HCA
	// picks its RDMA ports, NCCL_IB_DISABLE=1 or NCCL_NET=Socket turns it
	// to sockets on the interfaces NCCL_SOCKET_IFNAME names.
	NetNCCL NetStack = iota
	// NetUCX: the host backend's. UCX_NET_DEVICES names ports and
	// interfaces ("mlx5_0:1,eth0"); a UCX_TLS without an RDMA transport
	// leaves it the interfaces (TCP).
	NetUCX
)

func (s NetStack) String() string {
	if s == NetUCX {
		return "UCX"
	}
	return "NCCL"
}

// NetChoice is the port a stack's traffic between nodes takes, as far as
// this machine and its settings tell.
type NetChoice struct {
	// Port is the fastest of the active ports the settings allow: a rank
	// sends through one of them, and none faster.
	Port NetPort `json:"port"`
	// Candidates counts the active ports the settings allow.
	Candidates int `json:"candidates"`
	// By says what chose them: the setting and its value, or the default.
	By string `json:"by"`
	// GBs is Port's rate per direction, 0 unknown (no port, or one whose
	// rate sysfs does not give).
	GBs float64 `json:"gbs"`
}

// ChooseNetPort is the port stack takes between nodes, from ports
// (NetPorts), the settings getenv reads, and fallback, the interface the
// ranks' bootstrap uses ("" unknown), which is taken where the settings
// name nothing and no RDMA port is active. ok is false where no active
// port fits.
func ChooseNetPort(ports []NetPort, stack NetStack, getenv func(string) string, fallback string) (NetChoice, bool) {
	var allow func(NetPort) bool
	var by string
	if stack == NetNCCL {
		allow, by = ncclAllow(ports, getenv, fallback)
	} else {
		allow, by = ucxAllow(ports, getenv, fallback)
	}
	var c NetChoice
	found := false
	for _, p := range ports {
		if !p.Active || !allow(p) {
			continue
		}
		c.Candidates++
		if !found || p.GBs > c.Port.GBs {
			c.Port, found = p, true
		}
	}
	if !found {
		return NetChoice{By: by}, false
	}
	c.By, c.GBs = by, c.Port.GBs
	return c, true
}

// ncclAllow: NCCL's IB transport (RDMA ports, RoCE's too) unless turned
// off or there is no active port, then its socket transport.
func ncclAllow(ports []NetPort, getenv func(string) string, fallback string) (func(NetPort) bool, string) {
	netName := strings.ToLower(strings.TrimSpace(getenv("NCCL_NET")))
	ibOff := strings.TrimSpace(getenv("NCCL_IB_DISABLE")) == "1" || netName == "socket"
	var why string
	switch {
	case netName == "socket":
		why = "NCCL_NET=Socket"
	case ibOff:
		why = "NCCL_IB_DISABLE=1"
	default:
		hca := strings.TrimSpace(getenv("NCCL_IB_HCA"))
		m := parseNameList(hca)
		rdma := func(p NetPort) bool { return p.RDMA && m.match(p.Device, p.Port) }
		switch {
		case netName == "ib" || anyActive(ports, rdma):
			if hca != "" {
				return rdma, "NCCL_IB_HCA=" + hca
			}
			return rdma, "the fastest active RDMA port"
		case hca != "":
			// NCCL finds no IB device then and takes its sockets.
			why = "NCCL_IB_HCA=" + hca + " matches no active RDMA port"
		default:
			why = "no active RDMA port"
		}
	}
	if s := strings.TrimSpace(getenv("NCCL_SOCKET_IFNAME")); s != "" {
		m := parseNameList(s)
		return func(p NetPort) bool { return socketIface(p, m.matchNetdev) }, why + ", NCCL_SOCKET_IFNAME=" + s
	}
	return fallbackAllow(fallback), why + ", the bootstrap's interface"
}

// ucxAllow: UCX takes every device it can (RDMA first for bandwidth)
// unless UCX_NET_DEVICES names some; UCX_TLS without RDMA transports
// leaves it TCP on interfaces.
func ucxAllow(ports []NetPort, getenv func(string) string, fallback string) (func(NetPort) bool, string) {
	tls := strings.TrimSpace(getenv("UCX_TLS"))
	rdmaOK := ucxRDMA(tls)
	devs := strings.TrimSpace(getenv("UCX_NET_DEVICES"))
	tlsNote := ""
	if !rdmaOK {
		tlsNote = "UCX_TLS=" + tls + ", "
	}
	if devs != "" && !strings.EqualFold(devs, "all") {
		var names []string
		for _, n := range strings.Split(devs, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		return func(p NetPort) bool {
			for _, n := range names {
				// "mlx5_0:1", or "mlx5_0" for every port of it.
				if p.RDMA && rdmaOK && (ucxMatch(n, p.Name) || !strings.Contains(n, ":") && ucxMatch(n, p.Device)) {
					return true
				}
				if socketIface(p, func(dev string) bool { return ucxMatch(n, dev) }) {
					return true
				}
			}
			return false
		}, tlsNote + "UCX_NET_DEVICES=" + devs
	}
	rdma := func(p NetPort) bool { return p.RDMA }
	if rdmaOK && anyActive(ports, rdma) {
		return rdma, tlsNote + "the fastest active RDMA port"
	}
	return fallbackAllow(fallback), tlsNote + "the bootstrap's interface"
}

// ucxRDMA reports whether UCX_TLS leaves UCX an RDMA transport: unset,
// "all", an exclusion ("^...") that does not name ib, or a list naming
// one (rc, ud, dc and their variants, ib).
func ucxRDMA(tls string) bool {
	t := strings.ToLower(tls)
	if t == "" || t == "all" {
		return true
	}
	isRDMA := func(n string) bool {
		n = strings.TrimSpace(n)
		for _, pre := range []string{"rc", "ud", "dc", "ib"} {
			if strings.HasPrefix(n, pre) {
				return true
			}
		}
		return false
	}
	if rest, ok := strings.CutPrefix(t, "^"); ok {
		for _, n := range strings.Split(rest, ",") {
			if strings.TrimSpace(n) == "ib" {
				return false
			}
		}
		return true
	}
	for _, n := range strings.Split(t, ",") {
		if isRDMA(n) {
			return true
		}
	}
	return false
}

// ucxMatch: UCX_NET_DEVICES names devices exactly, or with a shell
// pattern ("mlx5_*:1").
func ucxMatch(pattern, name string) bool {
	if pattern == name {
		return true
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// socketIface allows an interface the matcher names: a plain one, or one
// an RDMA adapter owns (the adapter's port is then the link, its rate
// the one that counts).
func socketIface(p NetPort, match func(string) bool) bool {
	if !p.RDMA {
		return match(p.Device)
	}
	for _, n := range p.Netdevs {
		if match(n) {
			return true
		}
	}
	return false
}

// fallbackAllow allows the bootstrap's interface only (none when unknown).
func fallbackAllow(iface string) func(NetPort) bool {
	return func(p NetPort) bool {
		return iface != "" && socketIface(p, func(n string) bool { return n == iface })
	}
}

func anyActive(ports []NetPort, allow func(NetPort) bool) bool {
	for _, p := range ports {
		if p.Active && allow(p) {
			return true
		}
	}
	return false
}

// nameList is NCCL's list syntax (NCCL_IB_HCA, NCCL_SOCKET_IFNAME):
// comma-separated names, each a prefix unless "=" leads the list, a
// leading "^" (before any "=") excluding them instead; an RDMA entry may
// end ":port". An empty list allows everything.
type nameList struct {
	exclude, exact bool
	entries        []nameEntry
}

type nameEntry struct {
	name string
	port int // 0 any
}

func parseNameList(s string) nameList {
	var l nameList
	rest := strings.TrimSpace(s)
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		l.exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		l.exact, rest = true, r
	}
	for _, e := range strings.Split(rest, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		ent := nameEntry{name: e}
		if n, p, ok := strings.Cut(e, ":"); ok {
			if v, err := strconv.Atoi(p); err == nil && v > 0 {
				ent = nameEntry{name: n, port: v}
			}
		}
		l.entries = append(l.entries, ent)
	}
	return l
}

// match reports whether the list allows device's port (port 0: an
// interface, which has none).
func (l nameList) match(device string, port int) bool {
	if len(l.entries) == 0 {
		return true
	}
	hit := false
	for _, e := range l.entries {
		nameOK := device == e.name || (!l.exact && strings.HasPrefix(device, e.name))
		if nameOK && (e.port == 0 || e.port == port) {
			hit = true
			break
		}
	}
	return hit != l.exclude
}

func (l nameList) matchNetdev(name string) bool { return l.match(name, 0) }
