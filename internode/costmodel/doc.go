// Package costmodel is arithmetic, not a measurement: for N nodes of G
// GPUs, an intra-node link (NVLink through NVSwitch) and the nodes' NICs,
// it gives each leg of a collective its bytes per GPU and its time at the
// links' line rates, the total, and algbw and busbw as nccl-tests defines
// them (busbw = algbw × 2(n-1)/n for AllReduce, × (n-1)/n for
// ReduceScatter and AllGather, × 1 for Broadcast, n = N·G ranks; sizes are
// nccl-tests' whole buffer).
//
// Two schedules are modelled:
//
//   - flat ring: one ring (a pipelined chain for Broadcast) over all N·G
//     ranks, node after node, as many rings as a node has NICs, each ring
//     leaving a node through its own NIC. Every link of the ring is busy at
//     once, so the time is the slower link's, plus the latency of every hop
//     a piece of data makes along the ring (NIC hops at the network's step
//     latency, the others at NVLink's).
//   - hierarchical (goccl's across nodes): a reduce-scatter inside the node
//     (over NVLink), then each GPU's 1/G shard crosses the nodes along its
//     rail (the GPUs of one local rank, one per node) as a ring, NCCL's
//     double binary tree, or the direct exchange goccl's host backend runs
//     today, then an all-gather inside the node. ReduceScatter drops the
//     last leg, AllGather the first; Broadcast goes to one GPU per node on
//     the root's rail, then along a chain inside each node. The legs run
//     one after another, which is what goccl does; the model also gives
//     the bound for legs overlapped chunk by chunk (each link's legs' bytes
//     at once), which is what a pipelined implementation could reach.
//
// Every leg's time is bytes / rate + steps × the link's step latency. The
// rates are per GPU and per direction: NVLink's nominal figure (18 NVLink4
// links × 25 GB/s = 450 GB/s on H100 and H200), and the GPU's share of its
// node's NICs (8 × 400 Gb/s over 8 GPUs = 50 GB/s). What a GPU sends it
// also receives, over a full-duplex link, so one direction is the bound.
// No protocol overhead, congestion, or engine limit is modelled: NCCL's
// own multi-node figures sit below these line rates, and goccl's measured
// NVLink ceilings are in docs/perf.md.
package costmodel
