package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NetPort is a port this machine's traffic between nodes may take: a port
// of an RDMA adapter (InfiniBand, or RoCE over Ethernet) from
// /sys/class/infiniband, or a network interface from /sys/class/net that
// belongs to no RDMA adapter. An interface an adapter owns (IPoIB, the
// Ethernet side of RoCE) is listed with the adapter's ports, not again on
// its own: it is the same link.
type NetPort struct {
	// Name is "mlx5_0:1" for an RDMA port (as UCX_NET_DEVICES writes it),
	// the interface's name otherwise.
	Name   string `json:"name"`
	Device string `json:"device"`         // "mlx5_0", or the interface
	Port   int    `json:"port,omitempty"` // the RDMA port number; 0 for an interface
	RDMA   bool   `json:"rdma"`
	// LinkLayer is the RDMA port's: "InfiniBand", or "Ethernet" for RoCE.
	LinkLayer string `json:"link_layer,omitempty"`
	// Netdevs are the interfaces of the RDMA adapter (ib0, ens1f0np0).
	Netdevs []string `json:"netdevs,omitempty"`
	// State and Rate are what sysfs says: "4: ACTIVE" and
	// "400 Gb/sec (4X NDR)" for an RDMA port, "up" and "100000" (Mb/s)
	// for an interface.
	State  string `json:"state"`
	Rate   string `json:"rate"`
	Active bool   `json:"active"` // an RDMA port in state 4: ACTIVE, an interface up
	// Virtual marks an interface without a device of its own (a bridge,
	// veth, bond, tunnel).
	Virtual bool `json:"virtual,omitempty"`
	// GBs is the line rate per direction in GB/s; 0 where unknown.
	GBs float64 `json:"gbs"`
}

// NetPorts lists the RDMA ports and the other network interfaces under the
// sysfs root ("/sys"), RDMA ports first, each group sorted by name. The
// loopback is left out. What cannot be read leaves the port inactive or
// its rate unknown; the warnings say what.
func NetPorts(root string) (ports []NetPort, warnings []string) {
	sys := sysfs{root: root}
	owned := map[string]bool{} // interfaces an RDMA adapter owns
	devs, _ := os.ReadDir(filepath.Join(root, "class", "infiniband"))
	for _, d := range devs {
		dev := d.Name()
		var netdevs []string
		if ents, err := os.ReadDir(filepath.Join(root, "class", "infiniband", dev, "device", "net")); err == nil {
			for _, e := range ents {
				netdevs = append(netdevs, e.Name())
				owned[e.Name()] = true
			}
		}
		sort.Strings(netdevs)
		pents, err := os.ReadDir(filepath.Join(root, "class", "infiniband", dev, "ports"))
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("RDMA adapter %s: ports: %v", dev, err))
			continue
		}
		for _, pe := range pents {
			n, err := strconv.Atoi(pe.Name())
			if err != nil {
				continue
			}
			p := NetPort{Name: dev + ":" + pe.Name(), Device: dev, Port: n, RDMA: true, Netdevs: netdevs}
			p.LinkLayer, _ = sys.read("class", "infiniband", dev, "ports", pe.Name(), "link_layer")
			if p.State, err = sys.read("class", "infiniband", dev, "ports", pe.Name(), "state"); err != nil {
				warnings = append(warnings, fmt.Sprintf("RDMA port %s: state: %v", p.Name, err))
			}
			p.Active = portActive(p.State)
			if p.Rate, err = sys.read("class", "infiniband", dev, "ports", pe.Name(), "rate"); err != nil {
				warnings = append(warnings, fmt.Sprintf("RDMA port %s: rate: %v", p.Name, err))
			} else if gbps, ok := ParseIBRate(p.Rate); ok {
				p.GBs = gbps / 8
			} else {
				warnings = append(warnings, fmt.Sprintf("RDMA port %s: rate %q not understood", p.Name, p.Rate))
			}
			ports = append(ports, p)
		}
	}
	sort.Slice(ports, func(i, j int) bool {
		if ports[i].Device != ports[j].Device {
			return ports[i].Device < ports[j].Device
		}
		return ports[i].Port < ports[j].Port
	})

	ifs, _ := os.ReadDir(filepath.Join(root, "class", "net"))
	var plain []NetPort
	for _, e := range ifs {
		name := e.Name()
		if name == "lo" || owned[name] {
			continue
		}
		plain = append(plain, netdevPort(sys, name))
	}
	sort.Slice(plain, func(i, j int) bool { return plain[i].Name < plain[j].Name })
	return append(ports, plain...), warnings
}

// netdevPort reads one interface: operstate and speed (Mb/s; -1, or an
// error, while it has no link).
func netdevPort(sys sysfs, name string) NetPort {
	p := NetPort{Name: name, Device: name}
	p.State, _ = sys.read("class", "net", name, "operstate")
	if _, err := os.Stat(filepath.Join(sys.root, "class", "net", name, "device")); err != nil {
		p.Virtual = true
	}
	p.Active = p.State == "up"
	p.Rate, _ = sys.read("class", "net", name, "speed")
	if mbps, err := strconv.Atoi(p.Rate); err == nil && mbps > 0 {
		p.GBs = float64(mbps) / 8000
	}
	return p
}

// portActive: only a port in state 4 (ACTIVE) carries traffic; INIT and
// ARMED ports have a rate but no link yet.
func portActive(state string) bool {
	num, text, _ := strings.Cut(state, ":")
	return strings.TrimSpace(num) == "4" && strings.EqualFold(strings.TrimSpace(text), "ACTIVE")
}

// ParseIBRate reads an RDMA port's rate file, "400 Gb/sec (4X NDR)",
// "2.5 Gb/sec (1X SDR)", "53.125 Gb/sec (1X HDR)", "100Gb/s", into Gb/s.
// A rate of 0, a number without a unit, or anything else is not a rate
// (ok false).
func ParseIBRate(s string) (gbps float64, ok bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '('); i >= 0 {
		s = strings.TrimSpace(s[:i]) // the width and speed: "(4X NDR)"
	}
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	switch unit := strings.ToLower(strings.TrimSpace(s[end:])); unit {
	case "gb/sec", "gb/s", "gbps", "gbit/s":
		return v, true
	case "mb/sec", "mb/s", "mbps", "mbit/s":
		return v / 1000, true
	case "tb/sec", "tb/s", "tbps":
		return v * 1000, true
	}
	return 0, false
}
