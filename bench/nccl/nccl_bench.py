#!/usr/bin/env python3
"""NCCL's side of the side-by-side benchmark, through torch.distributed.

Run one process per GPU, e.g.
    python3 -m torch.distributed.run --nproc_per_node=2 bench/nccl/nccl_bench.py \
        --coll all_reduce -b 8 -e 2G -f 4 --graph 20 --json nccl.json

It measures what `goccl bench` measures, the way nccl-tests does: warm-up
iterations, then n iterations between CUDA events; with --graph k, k ops are
captured in one CUDA graph and the graph is replayed. Sizes, busbw factors and
the JSON rows match goccl's bench so bench/compare.py can pair them.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
DTYPES = {"float": torch.float32, "bfloat16": torch.bfloat16, "half": torch.float16, "int32": torch.int32}


def parse_size(s):
    s = s.strip().upper()
    mult = 1
    for suf, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if s.endswith(suf):
            s, mult = s[:-1], m
            break
    return int(float(s) * mult)


def sizes(lo, hi, factor):
    out, b = [], lo
    while b <= hi:
        out.append(b)
        b *= factor
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coll", default="all_reduce", choices=sorted(BUS_FACTOR))
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="128M")
    p.add_argument("-f", type=int, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("-d", default="float", choices=sorted(DTYPES))
    p.add_argument("--graph", type=int, default=0, help="ops per captured graph (0 = eager)")
    p.add_argument("--json", default="")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(dev)
    dtype = DTYPES[a.d]
    esize = torch.tensor([], dtype=dtype).element_size()
    stream = torch.cuda.Stream()
    rows = []
    for nbytes in sizes(parse_size(a.b), parse_size(a.e), a.f):
        # nccl-tests convention: all_gather/reduce_scatter sizes are totals.
        total = nbytes // esize
        if a.coll in ("all_gather", "reduce_scatter"):
            per = total // n
            if per == 0:
                continue
            total = per * n
        else:
            per = total
            if per == 0:
                continue
        g = torch.Generator(device="cuda").manual_seed(1234 + rank)
        if dtype.is_floating_point:
            big = torch.rand(total, device="cuda", dtype=torch.float32, generator=g).to(dtype)
        else:
            big = torch.randint(-100, 100, (total,), device="cuda", dtype=dtype, generator=g)
        small = big[:per].clone()

        def op():
            if a.coll == "all_reduce":
                dist.all_reduce(small)
            elif a.coll == "broadcast":
                dist.broadcast(small, 0)
            elif a.coll == "reduce":
                dist.reduce(small, 0)
            elif a.coll == "all_gather":
                dist.all_gather_into_tensor(big, small)
            else:
                dist.reduce_scatter_tensor(small, big)

        with torch.cuda.stream(stream):
            for _ in range(a.w):
                op()
            if a.graph:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    for _ in range(a.graph):
                        op()
                graph.replay()
            stream.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            if a.graph:
                reps = max(1, a.n // a.graph) if a.n >= a.graph else 1
                for _ in range(reps):
                    graph.replay()
                ops = reps * a.graph
            else:
                for _ in range(a.n):
                    op()
                ops = a.n
            end.record(stream)
            end.synchronize()
        us = start.elapsed_time(end) * 1000.0 / ops
        t = torch.tensor([us], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        us = t.item()
        size = total * esize
        algbw = size / us / 1e3
        res = {"time_us": us, "algbw_gbps": algbw, "busbw_gbps": algbw * BUS_FACTOR[a.coll](n), "wrong": -1}
        # torch's collectives run in place (all_reduce, broadcast, reduce) or
        # out of place (all_gather, reduce_scatter); one measurement fills both
        # columns so the row has goccl bench's JSON shape.
        rows.append({"size": size, "count": per, "type": a.d, "redop": "sum", "root": 0,
                     "out_of_place": res, "in_place": res})
        if rank == 0:
            print(f"{size:>12} {per:>12} {a.d:>8} {us:10.2f} {algbw:8.2f} {res['busbw_gbps']:8.2f}", flush=True)
        del big, small
        if a.graph:
            del graph
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "nccl " + ".".join(map(str, torch.cuda.nccl.version())),
                       "label": "NCCL (torch.distributed)" + (f" graph {a.graph}" if a.graph else " eager"),
                       "collective": a.coll, "backend": "gpu", "nranks": n,
                       "mode": {"iters": a.n, "warmup_iters": a.w, "graph": a.graph},
                       "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
