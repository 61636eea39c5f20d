#!/usr/bin/env python3
"""torch.distributed, backend "nccl", on goccl's libnccl.so.2.

PyTorch is not modified: the library is put in front of NCCL with
LD_PRELOAD (scripts/gpu/capi.sh does it), e.g.

    LD_PRELOAD=build/lib/libnccl.so.2 python3 -m torch.distributed.run \
        --standalone --nproc_per_node=2 tests/torch/nccl_capi.py

Every check compares the collective's result with what one process
computes from every rank's input: each rank regenerates all ranks' inputs
from their seeds and reduces them on the CPU in float64. Each check prints
one line "RESULT <name> PASS|FAIL|ERROR <detail>"; rank 0 prints the
summary "TORCH <passed>/<total>" last, and the exit status is non-zero when
a check did not pass. NCCL_CAPI_ONLY=TEXT runs the checks whose names hold
TEXT. Checks that need point-to-point calls run last, so
that a backend without them does not hide the other results.
"""
import ctypes
import datetime
import os
import sys
import traceback
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL = int(os.environ.get("LOCAL_RANK", "0"))
results = []


def report(name, ok, detail=""):
    status = "PASS" if ok else "FAIL"
    results.append((name, status))
    print(f"RESULT {name} {status} {detail}".rstrip(), flush=True)


def check(name):
    """Runs fn as check name; an exception is an ERROR line."""

    def wrap(fn):
        def run():
            try:
                fn(name)
            except Exception as e:  # a failed collective raises
                results.append((name, "ERROR"))
                msg = str(e).replace("\n", " | ")[:400]
                print(f"RESULT {name} ERROR {type(e).__name__}: {msg}", flush=True)
                if os.environ.get("NCCL_CAPI_TRACE"):
                    traceback.print_exc()

        run.name = name
        return run

    return wrap


def inputs(seed, shape, dtype, low=-8, high=9):
    """Every rank's input: small integers, so sums are exact in every type."""
    out = []
    for r in range(WORLD):
        g = torch.Generator().manual_seed(seed * 1000 + r)
        out.append(torch.randint(low, high, shape, generator=g).to(dtype))
    return out


DEV = None
OPS = {
    "sum": (dist.ReduceOp.SUM, lambda xs: sum(xs)),
    "prod": (dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
    "max": (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
    "min": (dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
    "avg": (dist.ReduceOp.AVG, lambda xs: sum(xs) / len(xs)),
}


def same(got, want, dtype):
    got = got.cpu().to(torch.float64)
    want = want.to(torch.float64)
    if dtype in (torch.bfloat16, torch.float16):
        return torch.allclose(got, want.to(dtype).to(torch.float64), rtol=1e-2, atol=1e-2)
    return torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def make_allreduce_check(opname, dtype):
    @check(f"all_reduce/{opname}/{str(dtype).replace('torch.', '')}")
    def run(name):
        op, ref = OPS[opname]
        seed = zlib.crc32(f"{opname}/{dtype}".encode()) % 10000  # alike on every rank
        low, high = (1, 3) if opname == "prod" else (-8, 9)
        xs = inputs(seed, (1031,), torch.float64, low, high)
        t = xs[RANK].to(dtype).to(DEV)
        dist.all_reduce(t, op=op)
        want = ref(xs)
        if opname == "avg" and not dtype.is_floating_point:
            want = torch.trunc(want)
        report(name, same(t, want, dtype))

    return run


@check("broadcast")
def t_broadcast(name):
    xs = inputs(11, (777,), torch.float32)
    root = WORLD - 1
    t = xs[RANK].to(DEV)
    dist.broadcast(t, src=root)
    report(name, same(t, xs[root], torch.float32))


@check("all_gather_into_tensor")
def t_allgather(name):
    xs = inputs(12, (333,), torch.bfloat16)
    out = torch.full((WORLD * 333,), -99.0, dtype=torch.bfloat16, device=DEV)
    dist.all_gather_into_tensor(out, xs[RANK].to(DEV))
    report(name, same(out, torch.cat(xs).to(torch.float64), torch.bfloat16))


@check("reduce_scatter_tensor")
def t_reducescatter(name):
    xs = inputs(13, (WORLD * 129,), torch.float32)
    out = torch.full((129,), -99.0, device=DEV)
    dist.reduce_scatter_tensor(out, xs[RANK].to(DEV), op=dist.ReduceOp.SUM)
    want = sum(xs)[RANK * 129:(RANK + 1) * 129]
    report(name, same(out, want, torch.float32))


@check("new_group")
def t_new_group(name):
    # A second communicator: every rank at 2 ranks, every rank but the
    # last beyond.
    members = list(range(WORLD)) if WORLD <= 2 else list(range(WORLD - 1))
    g = dist.new_group(members)
    xs = inputs(14, (65,), torch.float32)
    t = xs[RANK].to(DEV)
    if RANK in members:
        dist.all_reduce(t, group=g)
        report(name, same(t, sum(xs[m] for m in members), torch.float32), f"members {members}")
    else:
        report(name, True, "not a member")
    dist.barrier()


@check("ddp_step")
def t_ddp(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(torch.float64)
    ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(torch.float64)
    ref.load_state_dict(model.state_dict())
    ddp = nn.parallel.DistributedDataParallel(model.to(DEV), device_ids=[DEV.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    per = 8
    g = torch.Generator().manual_seed(99)
    data = torch.randn(WORLD * per, 16, generator=g, dtype=torch.float64)
    target = torch.randn(WORLD * per, 4, generator=g, dtype=torch.float64)
    mine = slice(RANK * per, (RANK + 1) * per)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(data[mine].to(DEV)), target[mine].to(DEV)).backward()
    opt.step()
    # One process, the whole batch: DDP averages the ranks' gradients of
    # their local means, which is the gradient of the global mean.
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ropt.zero_grad()
    nn.functional.mse_loss(ref(data), target).backward()
    ropt.step()
    worst = max((p.detach().cpu() - q.detach()).abs().max().item() for p, q in zip(ddp.module.parameters(), ref.parameters()))
    report(name, worst < 1e-9, f"max param diff {worst:.3g}")


@check("cuda_graph_all_reduce")
def t_graph(name):
    x = torch.zeros(4099, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(x)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(x)
    ok = True
    for it in range(3):
        xs = inputs(20 + it, (4099,), torch.float32)
        x.copy_(xs[RANK].to(DEV))
        g.replay()
        torch.cuda.synchronize()
        ok = ok and same(x, sum(xs), torch.float32)
    report(name, ok, "3 replays")


@check("premul_sum")
def t_premul(name):
    # ncclRedOpCreatePreMulSum: each rank's input scaled by its own factor
    # (rank + 1) / 2, then summed; the values stay exact in float32.
    n = 13
    xs = inputs(16, (n,), torch.float32)
    t = xs[RANK].to(DEV)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum((RANK + 1) / 2))
    want = sum(xs[p] * ((p + 1) / 2) for p in range(WORLD))
    report(name, same(t, want, torch.float32))


@check("reduce_scatter_premul_sum")
def t_rs_premul(name):
    # FSDP's gradient reduce-scatter with a pre-divided sum, in half
    # precision (PyTorch hands NCCL a bfloat16 op's factor as a float,
    # which NCCL's API reads as two bytes: half is the type to check).
    n = 257
    xs = inputs(18, (WORLD * n,), torch.float16)
    out = torch.full((n,), -99.0, device=DEV, dtype=torch.float16)
    dist.reduce_scatter_tensor(out, xs[RANK].to(DEV), op=dist._make_nccl_premul_sum(0.25))
    want = (sum(x.to(torch.float64) for x in xs) * 0.25)[RANK * n:(RANK + 1) * n]
    report(name, same(out, want, torch.float16))


@check("all_to_all_single")
def t_alltoall(name):
    n = 17
    xs = inputs(15, (WORLD * n,), torch.float32)
    out = torch.full((WORLD * n,), -99.0, device=DEV)
    dist.all_to_all_single(out, xs[RANK].to(DEV))
    want = torch.cat([xs[p][RANK * n:(RANK + 1) * n] for p in range(WORLD)])
    report(name, same(out, want, torch.float32))


@check("batch_isend_irecv")
def t_p2p(name):
    xs = inputs(16, (513,), torch.float32)
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    got = torch.full((513,), -99.0, device=DEV)
    ops = [dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, xs[RANK].to(DEV), nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    torch.cuda.synchronize()
    report(name, same(got, xs[prv], torch.float32))


def library_version():
    lib = ctypes.CDLL("libnccl.so.2")
    v = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(v))
    return v.value


def main():
    global DEV
    ndev = torch.cuda.device_count()
    DEV = torch.device("cuda", LOCAL % ndev)
    torch.cuda.set_device(DEV)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60))
    if RANK == 0:
        print(f"torch {torch.__version__}, world {WORLD} on {ndev} GPU(s), ncclGetVersion {library_version()}, "
              f"torch.cuda.nccl.version {torch.cuda.nccl.version()}", flush=True)
    checks = [make_allreduce_check(op, dt) for op in OPS for dt in (torch.float32,)]
    checks += [make_allreduce_check("sum", dt) for dt in (torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.float64)]
    checks += [make_allreduce_check("max", torch.int8), make_allreduce_check("avg", torch.bfloat16)]
    checks += [t_broadcast, t_allgather, t_reducescatter, t_new_group, t_ddp, t_graph, t_premul, t_rs_premul]
    checks += [t_alltoall, t_p2p]
    only = os.environ.get("NCCL_CAPI_ONLY")
    for c in checks:
        if only and only not in c.name:
            continue
        c()
    passed = sum(1 for _, s in results if s == "PASS")
    try:
        dist.destroy_process_group()
    except Exception as e:
        print(f"destroy_process_group: {e}", flush=True)
    if RANK == 0:
        print(f"TORCH {passed}/{len(results)}", flush=True)
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
