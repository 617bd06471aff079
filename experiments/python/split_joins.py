"""Fused-kernel task graphs with each concatenation's join split by branch: every Triton kernel
whose ATen ops include ``aten::cat`` and that follows two or more kernels whose output channels
add up to its own becomes one kernel per predecessor (its share of the channels, its time scaled
by that share times ``--factor``), each after its own predecessor and before every successor of
the join. For the simulator (``nimble-bench schedulers --simulate --graphs DIR``): what writing
such joins in place (option ``concat_in_place``) would give, at the join's speed (factor 1) or
faster.

    python3 experiments/python/split_joins.py --graphs paper-figs/results/fused-kernel-graphs-occupancy \\
        --models inception-v4,inception-v3,googlenet --batch 16 --factor 0.5 [--chain] --out-dir /tmp/split
"""

import argparse
import collections
import copy
import gzip
import json
from pathlib import Path


def split(graph, factor, chain=False):
    """``graph`` with its joins split; the number split. With ``chain``, each part of a join
    also follows the part before it (as the backend orders writes to one buffer)."""
    g = copy.deepcopy(graph)
    nodes = {t["id"]: t for t in g["nodes"]}
    pred = collections.defaultdict(list)
    for a, b in g["edges"]:
        pred[b].append(a)
    joins = {}
    for t in g["nodes"]:
        if not (t["op"].startswith("triton") and "aten::cat" in t["attrs"].get("aten", []) and len(pred[t["id"]]) > 1):
            continue
        channels = [nodes[p]["attrs"].get("out_shape", [0, 0])[1] for p in pred[t["id"]]]
        if sum(channels) == t["attrs"]["out_shape"][1]:
            joins[t["id"]] = list(zip(pred[t["id"]], channels))
    next_id = max(nodes) + 1
    part_of, parts = {}, collections.defaultdict(list)
    added = []
    for join, inputs in joins.items():
        t = nodes[join]
        shape = t["attrs"]["out_shape"]
        for k, (p, c) in enumerate(inputs):
            added.append({"id": next_id, "op": f"{t['op']}_part{k}", "attrs": dict(t["attrs"], out_shape=[shape[0], c, *shape[2:]]), "duration_us": t["duration_us"] * c / shape[1] * factor})
            part_of[(join, p)] = next_id
            parts[join].append(next_id)
            next_id += 1
    edges = set()
    for a, b in g["edges"]:
        for x in parts[a] if a in joins else [a]:
            for y in [part_of[(b, a)]] if b in joins else [b]:
                edges.add((x, y))
    if chain:
        for ids in parts.values():
            edges.update(zip(ids, ids[1:]))
    g["nodes"] = [t for t in g["nodes"] if t["id"] not in joins] + added
    g["edges"] = [list(e) for e in sorted(edges)]
    return g, len(joins)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--factor", type=float, default=1.0)
    parser.add_argument("--chain", action="store_true", help="each part after the one before it")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for model in args.models.split(","):
        name = f"{model}-float32-b{args.batch}.graph.json"
        source = Path(args.graphs) / (name + ".gz")
        graph = json.load(gzip.open(source) if source.exists() else open(Path(args.graphs) / name))
        result, count = split(graph, args.factor, args.chain)
        (out / name).write_text(json.dumps(result))
        print(f"{model}: {count} joins split, {len(graph['nodes'])} -> {len(result['nodes'])} kernels")


if __name__ == "__main__":
    main()
