package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// sysfs reads the few files Probe needs under a root, so that tests point
// it at a directory of their own.
type sysfs struct{ root string }

func (s sysfs) read(rel ...string) (string, error) {
	b, err := os.ReadFile(filepath.Join(append([]string{s.root}, rel...)...))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// numaNodes lists /sys/devices/system/node/node*/cpulist. A machine without
// that directory (no NUMA support) yields none and no error.
func (s sysfs) numaNodes() ([]NUMANode, error) {
	dir := filepath.Join(s.root, "devices", "system", "node")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []NUMANode{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topology: NUMA nodes: %w", err)
	}
	nodes := []NUMANode{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "node") {
			continue
		}
		id, err := strconv.Atoi(strings.TrimPrefix(name, "node"))
		if err != nil {
			continue // "node" files that are not nodes (has_cpu, online, ...)
		}
		list, err := s.read("devices", "system", "node", name, "cpulist")
		if err != nil {
			return nil, fmt.Errorf("topology: NUMA node %d: %w", id, err)
		}
		nodes = append(nodes, NUMANode{ID: id, CPUList: list})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, nil
}

// pciNUMA returns a PCI device's NUMA node (-1 when the platform does not
// say) and the CPUs local to it.
func (s sysfs) pciNUMA(busID string) (node int, cpus string, err error) {
	v, err := s.read("bus", "pci", "devices", busID, "numa_node")
	if err != nil {
		return -1, "", fmt.Errorf("topology: NUMA node of %s: %w", busID, err)
	}
	node, err = strconv.Atoi(v)
	if err != nil {
		return -1, "", fmt.Errorf("topology: NUMA node of %s: bad value %q", busID, v)
	}
	cpus, _ = s.read("bus", "pci", "devices", busID, "local_cpulist")
	return node, cpus, nil
}

// pciClass returns a PCI device's class code (0x068000 for NVSwitch).
func (s sysfs) pciClass(busID string) (uint32, error) {
	v, err := s.read("bus", "pci", "devices", busID, "class")
	if err != nil {
		return 0, err
	}
	c, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("topology: PCI class of %s: bad value %q", busID, v)
	}
	return uint32(c), nil
}
