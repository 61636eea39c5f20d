// Package twonodes makes two machines on one host for tests: two network
// namespaces joined by a veth pair, so that neither side's loopback
// reaches the other and a link between them can be taken down. The tests
// that use it need root and iproute2 (CI has both) and skip, saying why,
// where network namespaces cannot be made.
package twonodes
