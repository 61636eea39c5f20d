package twonodes

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

var seq atomic.Int32

// Dev is the veth end's name inside each namespace.
const Dev = "gveth0"

// Nodes are the two namespaces and their addresses on the link.
type Nodes struct {
	NS   [2]string
	Addr [2]netip.Addr
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// New makes the namespaces (removed at the test's end), or skips saying
// why it cannot: not root, no iproute2, a kernel or sandbox without
// network namespaces.
func New(t testing.TB) *Nodes {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (install iproute2)")
	}
	tag := strconv.Itoa(os.Getpid()%100000) + strconv.Itoa(int(seq.Add(1)))
	n := &Nodes{NS: [2]string{"goccl" + tag + "a", "goccl" + tag + "b"},
		Addr: [2]netip.Addr{netip.MustParseAddr("10.213.0.1"), netip.MustParseAddr("10.213.0.2")}}
	if err := ip("netns", "add", n.NS[0]); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", n.NS[0]) })
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ip("netns", "add", n.NS[1]))
	t.Cleanup(func() { _ = ip("netns", "del", n.NS[1]) })
	tmp := [2]string{"gva" + tag, "gvb" + tag}
	if err := ip("link", "add", tmp[0], "type", "veth", "peer", "name", tmp[1]); err != nil {
		t.Skipf("cannot make a veth pair here: %v", err)
	}
	for i := range 2 {
		must(ip("link", "set", tmp[i], "netns", n.NS[i]))
		must(ip("-n", n.NS[i], "link", "set", tmp[i], "name", Dev))
		must(ip("-n", n.NS[i], "addr", "add", n.Addr[i].String()+"/24", "dev", Dev))
		must(ip("-n", n.NS[i], "link", "set", Dev, "up"))
		must(ip("-n", n.NS[i], "link", "set", "lo", "up"))
	}
	return n
}

// LinkDown takes node i's end of the link down.
func (n *Nodes) LinkDown(t testing.TB, i int) {
	t.Helper()
	if err := ip("-n", n.NS[i], "link", "set", Dev, "down"); err != nil {
		t.Fatal(err)
	}
}

// Command runs name with args inside node i's namespace.
func (n *Nodes) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.NS[i], name}, args...)...)
}
