"""PyTorch DistributedDataParallel baselines for the data-parallel scaling record: one CIFAR-10
training step (forward, cross-entropy, backward with DDP's bucketed NCCL all-reduces, SGD with
momentum) per GPU at a per-GPU batch, one process per GPU, as `nimble-bench train --gpus`
measures Nimble.

Systems:
  ddp-eager    DDP as users run it (25 MiB buckets, gradients all-reduced while the backward runs)
  ddp-graph    the whole DDP step captured with torch.cuda.graph, as PyTorch documents it for
               NCCL >= 2.9.6: DDP built on a side stream, 11 eager DDP steps on it before the
               capture, TORCH_NCCL_ASYNC_ERROR_HANDLING=0
  ddp-compile  torch.compile(DDP(model), mode="reduce-overhead"): Dynamo's DDP optimizer splits the
               graph at the buckets, Inductor compiles each piece, CUDA graphs replay them
  ddp-backend  torch.compile(DDP(model), backend="nimble"): the same pieces on Nimble's streams

A compiled system's first step is checked against an eager DDP copy of the same initial weights
on the same batch (`param_error`: the norm of all parameters' difference after the step relative to
theirs; `worst_param_error`: the largest such ratio of one parameter); its preparation
(`prepare_seconds`) includes that first step, the compile. A system that raises is its failed row
(`failed`: the exception's first line); the others still run. With --no-optimize-ddp Dynamo
compiles DDP's whole model as one graph (torch._dynamo.config.optimize_ddp=False) instead of one
piece per bucket: on torch 2.11 Inductor fails its own stride check on ResNet-50's
convolution_backward when the pieces are split (experiments/python/probes/ddp_conv_backward_probe.py).

Method as `nimble-bench train --gpus`: cuDNN benchmark on, fresh randn inputs and random labels
for every step (made before timing), warm-ups, then each step timed with CUDA events on the
current stream with no synchronization between steps (the host runs ahead, as in a training
loop, so the ranks meet on the GPU and not at their hosts); every rank times its own steps and
the slowest rank's median is the configuration's step.

    python3 experiments/python/ddp.py --out OUT.json [--models resnet50,mobilenet-v2]
        [--batches 32,64,128] [--gpus 1,2] [--systems ddp-eager,ddp-graph]
        [--no-optimize-ddp] [--warmup 50] [--iters 100] [--commit SHA]

The models are torchvision's with 10 classes on 32x32 inputs, as in baselines.py --training.
"""

import argparse
import copy
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from baselines import timed_in_a_queue
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baselines  # noqa: E402  (summary, timed, write_record)

CIFAR_MODELS = baselines.CIFAR_MODELS
WARMUP_BEFORE_CAPTURE = 11  # PyTorch's documented minimum of eager DDP steps before a capture
# The systems compiled by torch.compile, with its arguments.
COMPILED = {"ddp-compile": {"mode": "reduce-overhead"}, "ddp-backend": {"backend": "nimble"}}
SYSTEMS = ["ddp-eager", "ddp-graph", *COMPILED]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_step(system, model, batch, rank):
    """A function (x, y) -> None taking one DDP SGD step, eagerly or as one CUDA graph."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    side = torch.cuda.Stream()
    if system == "ddp-graph":
        # PyTorch's recipe for capturing DDP: built, and warmed up, on a side stream.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ddp = DDP(model, device_ids=[rank])
        torch.cuda.current_stream().wait_stream(side)
    else:
        ddp = DDP(model, device_ids=[rank])
    optimizer = baselines.sgd(ddp.parameters())

    def eager(x, y):
        baselines.sgd_step(ddp, optimizer, x, y)

    if system == "ddp-eager":
        return eager
    if system in COMPILED:
        run = torch.compile(ddp, **COMPILED[system])
        return lambda x, y: baselines.sgd_step(run, optimizer, x, y)
    if system != "ddp-graph":
        raise SystemExit(f"unknown system {system!r}; expected one of {SYSTEMS}")
    return baselines.captured_step(eager, lambda x, y: F.cross_entropy(ddp(x), y), optimizer, batch, rank, WARMUP_BEFORE_CAPTURE, side)


def first_step_error(step, model, reference, batch, rank):
    """One step of `step` (compiling it) and of an eager DDP copy (`reference`, the same initial
    weights) on the same batch: the norm of all parameters' difference after it relative to theirs,
    and the largest such ratio of one parameter."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    eager = DDP(reference, device_ids=[rank])
    optimizer = baselines.sgd(eager.parameters())
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, 3, 32, 32, generator=generator).to(rank)
    y = torch.randint(10, (batch,), generator=generator).to(rank)
    step(x, y)
    baselines.sgd_step(eager, optimizer, x, y)
    torch.cuda.synchronize()
    got, expected = list(model.parameters()), list(reference.parameters())
    return baselines.relative_norm(got, expected), max(baselines.relative_norm([a], [b]) for a, b in zip(got, expected))


def pipelined(step, batch, rank, warmup, iterations):
    """Step times (µs): CUDA events around each step, no synchronization between the steps."""
    data = [(torch.randn(batch, 3, 32, 32, device=rank), torch.randint(10, (batch,), device=rank)) for _ in range(warmup + iterations)]
    for x, y in data[:warmup]:
        step(x, y)
    torch.cuda.synchronize()
    return timed_in_a_queue([lambda x=x, y=y: step(x, y) for x, y in data[warmup:]])


def worker(rank, world, port, args, scratch):
    import torchvision.models as tv

    os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.backends.cudnn.benchmark = True
    torch._dynamo.config.optimize_ddp = args.optimize_ddp
    rows = []
    try:
        for batch in args.batches:
            for name in args.models:
                for system in args.systems:
                    torch.manual_seed(0)
                    model = getattr(tv, CIFAR_MODELS[name])(num_classes=10).to(rank).train()
                    reference = copy.deepcopy(model) if system in COMPILED else None
                    step = None
                    try:
                        started = time.time()
                        step = ddp_step(system, model, batch, rank)
                        error, worst = (None, None) if reference is None else first_step_error(step, model, reference, batch, rank)
                        seconds = time.time() - started
                        samples = pipelined(step, batch, rank, args.warmup, args.iters)
                    except Exception as e:  # noqa: BLE001 - a system that fails is its failed row; the others still run
                        failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                        rows.append({"model": name, "batch": batch, "system": system, "rank": rank, "failed": failure})
                        print(f"  {name:<14} b{batch:<4} {world} GPU {system:<11} rank {rank} failed: {failure}", file=sys.stderr, flush=True)
                    else:
                        rows.append({"model": name, "batch": batch, "system": system, "rank": rank, "samples_us": samples, "prepare_seconds": seconds, "param_error": error, "worst_param_error": worst})
                        if rank == 0:
                            checked = "" if error is None else f", first step {error:.1e} from eager DDP's (worst parameter {worst:.1e})"
                            print(f"  {name:<14} b{batch:<4} {world} GPU {system:<11} {statistics.median(samples) / 1000:8.3f} ms{checked}", file=sys.stderr, flush=True)
                    del step, model
                    torch._dynamo.reset()
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    dist.barrier()
    finally:
        with open(os.path.join(scratch, f"rank-{world}-{rank}.json"), "w") as f:
            json.dump(rows, f)
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="resnet50,mobilenet-v2")
    parser.add_argument("--batches", default="32,64,128")
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--systems", default="ddp-eager,ddp-graph")
    parser.add_argument("--no-optimize-ddp", dest="optimize_ddp", action="store_false",
                        help="compile DDP's whole model as one graph (torch._dynamo.config.optimize_ddp=False), not one per bucket")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--commit", default=os.environ.get("NIMBLE_COMMIT", "unknown"))
    args = parser.parse_args()
    args.device = "cuda"
    args.models = [m.strip() for m in args.models.split(",")]
    unknown = [m for m in args.models if m not in CIFAR_MODELS]
    if unknown:
        raise SystemExit(f"error: {unknown} are not CIFAR-10 training models; expected some of {sorted(CIFAR_MODELS)}")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.systems = [s.strip() for s in args.systems.split(",")]
    counts = [int(g) for g in args.gpus.split(",")]
    available = torch.cuda.device_count()
    if any(g < 1 or g > available for g in counts):
        raise SystemExit(f"error: --gpus {args.gpus}: this machine has {available} GPUs")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off

    rows = []
    for world in counts:
        with tempfile.TemporaryDirectory() as scratch:
            mp.start_processes(worker, args=(world, free_port(), args, scratch), nprocs=world, join=True, start_method="spawn")
            per_rank = {}
            for rank in range(world):
                with open(os.path.join(scratch, f"rank-{world}-{rank}.json")) as f:
                    per_rank[rank] = json.load(f)
        for first in per_rank[0]:
            key = (first["model"], first["batch"], first["system"])
            ranks = [next(r for r in per_rank[k] if (r["model"], r["batch"], r["system"]) == key) for k in range(world)]
            failures = [r["failed"] for r in ranks if "failed" in r]
            if failures:
                rows.append({"model": first["model"], "batch": first["batch"], "gpus": world, "system": first["system"], "failed": failures[0]})
                continue
            medians = [statistics.median(r["samples_us"]) for r in ranks]
            rows.append({
                "model": first["model"], "batch": first["batch"], "gpus": world, "system": first["system"],
                "step": baselines.summary(first["samples_us"]), "rank_medians_us": medians,
                "samples_per_s": world * first["batch"] / (max(medians) * 1e-6), "prepare_seconds": first["prepare_seconds"],
                "param_errors": [r["param_error"] for r in ranks], "worst_param_errors": [r["worst_param_error"] for r in ranks],
            })
    method = ("data parallel, one process per GPU, NCCL (NCCL_NVLS_ENABLE=0); torchvision models, 10 classes, 32x32; SGD lr 0.01 momentum 0.9 "
              "weight decay 5e-4 (PyTorch's default foreach implementation); DDP default 25 MiB buckets; fresh randn inputs and random labels for every step (made before timing); "
              "CUDA events around each step with no synchronization between steps, each rank's median, the slowest rank's is the configuration's; ddp-graph: DDP built on a side stream, "
              f"{WARMUP_BEFORE_CAPTURE} eager steps there, then the whole step captured with torch.cuda.graph; ddp-compile: torch.compile(DDP(model), mode='reduce-overhead'); "
              "ddp-backend: torch.compile(DDP(model), backend='nimble'); a compiled system's first step checked against an eager DDP copy of the same weights on the same batch "
              "(param_errors, per rank: the norm of all parameters' difference after it relative to theirs; worst_param_errors: the largest ratio of one parameter), its prepare_seconds "
              "including that step; a system that raised is its failed row"
              + ("; torch._dynamo.config.optimize_ddp=False (DDP's whole model one graph)" if not args.optimize_ddp else "; Dynamo's DDP optimizer on (one graph per bucket)"))
    baselines.write_record(args, "pytorch-ddp", rows, [], method)
    print(f"{'model':<14} {'batch':>5} {'GPUs':>4} " + " ".join(f"{s:>12}" for s in args.systems) + "   (samples/s)")
    for world in counts:
        for batch in args.batches:
            for name in args.models:
                cells = [next((f"{r['samples_per_s']:12.0f}" if "samples_per_s" in r else f"{'failed':>12}" for r in rows if (r["model"], r["batch"], r["gpus"], r["system"]) == (name, batch, world, s)), f"{'-':>12}") for s in args.systems]
                print(f"{name:<14} {batch:>5} {world:>4} " + " ".join(cells))


if __name__ == "__main__":
    main()
