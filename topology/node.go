package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// NodeID names the machine a rank runs on: ranks with equal NodeIDs share
// host memory, IPC handles and POSIX fds; ranks with different ones share
// nothing but the network. It is a hash, so that it has a fixed size on the
// wire and says nothing about the machine beyond equality.
type NodeID [16]byte

// String is the id's first 8 bytes in hex, enough to tell nodes apart in
// logs.
func (n NodeID) String() string { return hex.EncodeToString(n[:8]) }

// NodeSource is what LocalNode reads; tests replace it.
type NodeSource struct {
	Getenv   func(string) string
	Hostname func() (string, error)
	ReadFile func(string) ([]byte, error)
}

// OSNodeSource reads the process's environment and the running system.
var OSNodeSource = NodeSource{Getenv: os.Getenv, Hostname: os.Hostname, ReadFile: os.ReadFile}

// bootIDPath changes with every boot, so that a container image cloned
// onto another machine with the same hostname is still another node.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// LocalNode identifies this machine: a hash of GOCCL_HOSTID when set (as
// NCCL_HOSTID for NCCL, for containers or fake nodes on one machine),
// else of the hostname and the boot id. desc says what was hashed, for
// logs.
func LocalNode(src NodeSource) (id NodeID, desc string, err error) {
	if v := strings.TrimSpace(src.Getenv("GOCCL_HOSTID")); v != "" {
		return hashNode("hostid:" + v), "GOCCL_HOSTID=" + v, nil
	}
	host, err := src.Hostname()
	if err != nil {
		return NodeID{}, "", fmt.Errorf("topology: node id: hostname: %w", err)
	}
	boot, err := src.ReadFile(bootIDPath)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		// Without a boot id the hostname alone decides (some sandboxes
		// hide /proc/sys): still right unless two machines share a name.
		return hashNode("host:" + host), "hostname " + host, nil
	case err != nil:
		// Anything else (out of descriptors, say) is this rank's trouble:
		// falling back would make it look like another node.
		return NodeID{}, "", fmt.Errorf("topology: node id: %w", err)
	}
	b := strings.TrimSpace(string(boot))
	return hashNode("host:" + host + "\x00boot:" + b), "hostname " + host + ", boot id " + b, nil
}

func hashNode(s string) NodeID {
	sum := sha256.Sum256([]byte(s))
	var id NodeID
	copy(id[:], sum[:])
	return id
}

// Nodes groups ranks by node, in order of each node's lowest rank:
// Nodes()[k] lists the ranks of node k, ascending.
func Nodes(ids []NodeID) [][]int {
	members, _, _ := layout(ids)
	return members
}

// Layout is Nodes for node keys given as strings (a backend's view of the
// job), with each rank's node number and its local rank on that node:
// members[nodeOf[r]][localOf[r]] == r.
func Layout(keys []string) (members [][]int, nodeOf, localOf []int) { return layout(keys) }

func layout[K comparable](keys []K) (members [][]int, nodeOf, localOf []int) {
	index := map[K]int{}
	nodeOf, localOf = make([]int, len(keys)), make([]int, len(keys))
	for r, key := range keys {
		k, ok := index[key]
		if !ok {
			k = len(members)
			index[key] = k
			members = append(members, nil)
		}
		nodeOf[r], localOf[r] = k, len(members[k])
		members[k] = append(members[k], r)
	}
	return members, nodeOf, localOf
}
