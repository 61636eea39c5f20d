// Package topology gathers the facts goccl decides from: GPUs, the links
// between them (NVLink, NVSwitch, PCIe path levels), peer access, the
// driver's capabilities (UVA, IPC, VMM, fabric handles, multicast), the
// CPU and NUMA layout. Facts come from a Source interface so that tests feed
// fakes; the result is plain data that serializes to JSON and is compared
// across ranks before any choice is made. NetPorts lists the ports traffic
// between nodes may take (RDMA adapters' ports, network interfaces) with
// their line rates, and ChooseNetPort the one NCCL's or UCX's settings
// leave a backend.
package topology
