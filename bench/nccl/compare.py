#!/usr/bin/env python3
"""Pair a goccl bench JSON with an NCCL one (same collective, same sizes) and
print size, both times and busbw, and the ratio; optionally append the
pairs to a combined JSON.

    python3 bench/nccl/compare.py goccl.json nccl.json [--out pairs.json]
"""
import argparse
import json


def best(row):
    # The faster of out-of-place and in-place, as both tools report both.
    a, b = row["out_of_place"], row["in_place"]
    return a if a["time_us"] <= b["time_us"] else b


def main():
    p = argparse.ArgumentParser()
    p.add_argument("goccl")
    p.add_argument("nccl")
    p.add_argument("--out", default="")
    a = p.parse_args()
    g, n = json.load(open(a.goccl)), json.load(open(a.nccl))
    nrows = {r["size"]: r for r in n["rows"]}
    pairs = []
    title = f"{g['collective']} {g.get('label', '')} vs {n.get('label', 'nccl')}"
    print(f"# {title}")
    print(f"{'size(B)':>12} {'goccl us':>10} {'nccl us':>10} {'goccl bus':>10} {'nccl bus':>10} {'speedup':>8}")
    for r in g["rows"]:
        m = nrows.get(r["size"])
        if m is None:
            continue
        gb, nb = best(r), best(m)
        sp = nb["time_us"] / gb["time_us"] if gb["time_us"] > 0 else 0.0
        pairs.append({"size": r["size"], "goccl_us": gb["time_us"], "nccl_us": nb["time_us"],
                      "goccl_busbw": gb["busbw_gbps"], "nccl_busbw": nb["busbw_gbps"], "speedup": sp})
        print(f"{r['size']:>12} {gb['time_us']:>10.2f} {nb['time_us']:>10.2f} "
              f"{gb['busbw_gbps']:>10.2f} {nb['busbw_gbps']:>10.2f} {sp:>7.2f}x")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"title": title, "pairs": pairs}, f, indent=1)


if __name__ == "__main__":
    main()
