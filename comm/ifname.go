package comm

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/goccl/goccl/collectives"
)

// ifnameVar names the interfaces goccl listens on where it chooses an
// address itself, with NCCL_SOCKET_IFNAME's syntax.
const ifnameVar = "GOCCL_SOCKET_IFNAME"

// netIface is one network interface as the matcher sees it; tests make
// them up.
type netIface struct {
	name  string
	up    bool
	addrs []netip.Addr
}

// ifPattern is a parsed GOCCL_SOCKET_IFNAME: a comma-separated list of
// name prefixes; "^" first excludes the listed ones instead, "=" (after
// any "^") makes the names exact.
type ifPattern struct {
	exclude, exact bool
	names          []string
}

func parseIfPattern(s string) (ifPattern, error) {
	var p ifPattern
	rest := strings.TrimSpace(s)
	if strings.HasPrefix(rest, "^") {
		p.exclude, rest = true, rest[1:]
	}
	if strings.HasPrefix(rest, "=") {
		p.exact, rest = true, rest[1:]
	}
	for _, n := range strings.Split(rest, ",") {
		if n = strings.TrimSpace(n); n != "" {
			p.names = append(p.names, n)
		}
	}
	if len(p.names) == 0 {
		return p, envErr(ifnameVar, s, "want interface names or prefixes, such as eth0 or ^docker,lo")
	}
	return p, nil
}

func (p ifPattern) matches(name string) bool {
	hit := false
	for _, n := range p.names {
		if name == n || (!p.exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != p.exclude
}

// usableAddr is an interface's first IPv4 address, else its first IPv6
// one that needs no zone (a unique id carries none).
func usableAddr(ifc netIface) (netip.Addr, bool) {
	for _, a := range ifc.addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), true
		}
	}
	for _, a := range ifc.addrs {
		if a.Is6() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() {
			return a.WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// chooseIface picks the first interface, in the system's order, that the
// pattern matches, is up and has a usable address. The error names the
// variable, the pattern and the interfaces present.
func chooseIface(spec string, ifaces []netIface) (netip.Addr, string, error) {
	p, err := parseIfPattern(spec)
	if err != nil {
		return netip.Addr{}, "", err
	}
	for _, ifc := range ifaces {
		if !ifc.up || !p.matches(ifc.name) {
			continue
		}
		if a, ok := usableAddr(ifc); ok {
			return a, ifc.name, nil
		}
	}
	var present []string
	for _, ifc := range ifaces {
		d := ifc.name
		if a, ok := usableAddr(ifc); ok {
			d += " " + a.String()
		} else {
			d += " no usable address"
		}
		if !ifc.up {
			d += ", down"
		}
		present = append(present, d)
	}
	return netip.Addr{}, "", fmt.Errorf("%w: %s=%q matches no interface that is up with an IPv4 or IPv6 address; interfaces present: %s",
		collectives.ErrInvalidArgument, ifnameVar, spec, strings.Join(present, "; "))
}

// systemIfaces lists this machine's interfaces and their addresses.
func systemIfaces() ([]netIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("%s: listing interfaces: %w", ifnameVar, err)
	}
	out := make([]netIface, 0, len(ifs))
	for _, ifc := range ifs {
		ni := netIface{name: ifc.Name, up: ifc.Flags&net.FlagUp != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("%s: addresses of %s: %w", ifnameVar, ifc.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					ni.addrs = append(ni.addrs, ip.Unmap())
				}
			}
		}
		out = append(out, ni)
	}
	return out, nil
}

// listenIP is the address goccl listens on where it chooses one itself
// (a new unique id, rank 0 in file mode, the rescue listener and with it
// the bootstrap listeners of Split's and Shrink's children): the
// interface GOCCL_SOCKET_IFNAME names, else fallback. Without the setting
// goccl cannot know before rendezvous whether the job spans nodes, so the
// default stays the loopback (or, for the rescue listener, the interface
// of the bootstrap's connections); jobs across nodes set it or give rank
// 0's address (GOCCL_COMM_ID, MASTER_ADDR).
func listenIP(spec string, fallback netip.Addr) (netip.Addr, error) {
	if strings.TrimSpace(spec) == "" {
		return fallback, nil
	}
	ifs, err := systemIfaces()
	if err != nil {
		return netip.Addr{}, err
	}
	a, _, err := chooseIface(spec, ifs)
	return a, err
}

var loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// listenOn binds a free TCP port on ip.
func listenOn(ip netip.Addr) (net.Listener, error) {
	network := "tcp6"
	if ip.Is4() {
		network = "tcp4"
	}
	return net.Listen(network, netip.AddrPortFrom(ip, 0).String())
}
