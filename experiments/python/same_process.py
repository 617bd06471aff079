"""The same-process comparison: in one Python process, on the same module object, PyTorch eager,
`torch.cuda.graph` (the whole forward captured on one stream), `torch.compile(mode=
"reduce-overhead")`, `torch.compile(mode="max-autotune")` (Inductor's autotuned kernels, also captured
as CUDA graphs: each compiler's row counts the captures Inductor skipped, ``cudagraph_skips``), Nimble
through the `nimble_rs` package and `torch.compile(backend="nimble")`
(Inductor's kernels on Nimble's streams), each measured the paper's way
(cuDNN benchmark on, 50 warm-ups, 100 timed calls on fresh random inputs, CUDA events around
each call on the current stream, median; every system prepared first and then timed in rounds,
each round every system in turn, so that the spread of its round medians measures the run's
noise and a drift of the machine falls on every system alike), in float32 (PyTorch's defaults), bfloat16 or
float16 (the module and its float inputs cast), at batch 1 or more, the same for every system. Each system's
output is checked against eager's on a fresh input first; its peak memory (allocated during its
preparation and first calls, above what the module holds) is recorded.

Models: the zoo's models that have a PyTorch reference (../reference/export_reference.py; the
list is nimble-bench's own, `nimble-bench models --json`), then GoogLeNet, Inception-v4 (timm)
and BERT-base (transformers, 1x128 token ids) from the coverage set, and Llama-, Qwen2- and
Mistral-style decoders (transformers, 8 layers, hidden 1024, 128 tokens, random weights). The record is rewritten
after every model, so a run cut short keeps what it measured; `nimble-bench same-process`
renders its figure.

    python3 experiments/python/same_process.py --models-json MODELS.json --out OUT.json \
        [--models a,b|all] [--systems eager,cuda-graph,compile,max-autotune,nimble,backend] [--warmup 50] \
        [--iters 100] [--compile-seconds 0] [--rounds 3] [--dtype float32|bfloat16|float16] [--batch 1] \
        [--checks 5] [--save-torchscript NAME=FILE] [--commit SHA]

`--save-torchscript inception-v3=FILE` also writes the module Nimble traced as a TorchScript
file, for the Rust CLI to measure the very same model (`nimble-bench infer --torchscript`).
`--compile-seconds N` bounds each compiler's preparation of a model (max-autotune's autotuning can take minutes): one
past it is that model's failed row ("did not compile within N s"), the other systems are kept.
"""

import argparse
import gc
import json
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch._inductor.utils import fresh_cache

from baselines import first_output, load_reference_module, round_ratios, summary, timed_rounds, write_record
from workloads import COVERAGE_MODELS, DECODERS, record_model, warm_up_compilers

SYSTEMS = ["eager", "cuda-graph", "compile", "max-autotune", "nimble", "backend"]
# Float32 with TF32 convolutions (PyTorch's default) and reassociations: every system must land
# within the inference tolerance of the CLI's check. bfloat16 keeps 8 bits of mantissa: fused
# kernels that round once where eager rounds after every op drift by a few of its ulps; float16
# (11 bits) is held to the same.
TOLERANCE = {"float32": 1e-2, "bfloat16": 5e-2, "float16": 5e-2}


def backend_system(model, example, options=None):
    """torch.compile(backend="nimble", options=options): compiled, planned and captured on its
    first calls."""
    import nimble_rs

    before = len(nimble_rs.dynamo.reports())
    run = torch.compile(model, backend="nimble", options=options)
    for _ in range(3):
        run(example)
    reports = nimble_rs.dynamo.reports()[before:]
    keep = ("granularity", "algorithm", "kernels", "streams", "syncs", "regions", "shared_buffers", "shared_kept_to_end", "choice", "reason", "timed_again", "measured_ms", "measured_error", "measured_spread", "priority", "critical_path", "hoisted_kernels", "not_hoisted", "hoisted_bytes", "weight_stream_kernels", "weight_stream_left", "separated_weight_buffers", "compile_seconds", "inductor_seconds", "capture_seconds", "peak_bytes", "unplanned", "addresses_checked", "fused_convolutions", "depthwise_kernels", "transposed_products", "concat_in_place", "allocated_ahead", "allocated_before_fork")
    return run, {"backend_graphs": [{k: r[k] for k in keep if k in r} for r in reports]}


def nimble_system(model, example, save_to):
    import nimble_rs

    nimble = nimble_rs.Nimble(model)
    report = nimble.prepare(example)
    if save_to is not None:
        # What Nimble traced, for the CLI: the same module in the same mode.
        with torch.no_grad():
            torch.jit.trace(model, (example,), strict=False, check_trace=False).save(save_to)
    return nimble, {k: report[k] for k in ("streams", "syncs", "tasks", "kernel_nodes") if k in report}


def cuda_graph_system(model, example):
    """PyTorch's own whole-forward capture: warm up on a side stream, capture, replay."""
    static_input = example.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_input)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = model(static_input)

    def replay(x):
        static_input.copy_(x)
        graph.replay()
        return static_output

    return replay


def output_spread(outputs):
    """How much eager's outputs on different inputs differ: the largest max-abs difference from
    the first over its max-abs value (near 0: the output does not depend on the input, and no
    error against eager can tell a wrong system from a right one)."""
    first = outputs[0].float()
    scale = first.abs().max().clamp_min(1e-30)
    return max((((o.float() - first).abs().max()) / scale).item() for o in outputs[1:]) if len(outputs) > 1 else float("nan")


def tf32_drift(model, checks):
    """How far eager's own output moves when its convolutions and matrix products round to
    float32 instead of TF32 (PyTorch's default for convolutions): the median over the checked
    inputs of the relative max-abs difference. The rounding a system may differ from eager by
    is of this size; a network that amplifies rounding shows it here first."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        drifts = sorted(relative_error(model(x), expected) for x, expected in checks)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
    return drifts[len(drifts) // 2]


def cudagraph_skips():
    """How many times Inductor has declined to capture a compiled graph as a CUDA graph in this
    process (its own counter): a compiler whose count grows ran those graphs kernel by kernel."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


@contextmanager
def time_limit(seconds, what):
    """Raises TimeoutError in this (the main) thread once ``seconds`` have passed (0: no limit)."""
    if not seconds:
        yield
        return

    def expired(signum, frame):
        raise TimeoutError(f"{what} did not compile within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def compiled_by_inductor(model, example, mode, notes, options=None, seconds=0):
    """torch.compile in ``mode`` (or with ``options``), from empty caches (neither compiler's
    compile time counts kernels another compiled), compiled and captured by three calls (not in
    the warm-ups' count); the captures Inductor skipped are kept in ``notes``."""
    skipped = cudagraph_skips()
    with fresh_cache(delete=False), time_limit(seconds, mode or "torch.compile"):
        run = torch.compile(model, mode=mode) if options is None else torch.compile(model, options=options)
        for _ in range(3):
            run(example)
    notes["cudagraph_skips"] = cudagraph_skips() - skipped
    return run


def prepared(system, model, make_input, save_to, variants=None, compile_seconds=0):
    """A function of the input for `system`, the seconds it took to make it, and notes (its
    peak memory among them)."""
    # What an earlier model's systems left for the collector goes before the base is read:
    # freed during this preparation, it made a peak negative (Qwen2 after Llama, a5d5cac).
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    started = time.time()
    example = make_input()
    notes = {}
    if system == "eager":
        run = model
    elif system == "cuda-graph":
        run = cuda_graph_system(model, example)
    elif system in ("compile", "max-autotune"):
        mode = "reduce-overhead" if system == "compile" else system
        run = compiled_by_inductor(model, example, mode, notes, seconds=compile_seconds)
    elif system == "nimble":
        run, notes = nimble_system(model, example, save_to)
    elif system == "backend":
        with fresh_cache(delete=False), time_limit(compile_seconds, "the backend"):
            run, notes = backend_system(model, example)
    elif system in (variants or {}) and system.startswith("compile-"):
        # reduce-overhead with Inductor settings of its own (``--compile-variant``): the mode's
        # options, which torch.compile(mode="reduce-overhead") applies, and these beside them.
        options = {**torch._inductor.list_mode_options("reduce-overhead"), **variants[system]}
        run = compiled_by_inductor(model, example, None, notes, options=options, seconds=compile_seconds)
        notes["compile_options"] = variants[system]
    elif system in (variants or {}):
        with fresh_cache(delete=False):
            run, notes = backend_system(model, example, variants[system])
        notes["backend_options"] = variants[system]
    else:
        raise SystemExit(f"unknown system {system!r}; expected one of {SYSTEMS}")
    torch.cuda.synchronize()
    notes["peak_bytes"] = torch.cuda.max_memory_allocated() - base
    return run, time.time() - started, notes


def relative_error(got, expected):
    got, expected = first_output(got).float(), first_output(expected).float()
    return ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def rms_error(got, expected):
    """Root-mean-square difference over root-mean-square value: every element's drift, where the
    max-abs error rests on one element (in bfloat16, a unit of the last place or two)."""
    got, expected = first_output(got).float(), first_output(expected).float()
    return (((got - expected) ** 2).mean().sqrt() / (expected**2).mean().sqrt().clamp_min(1e-30)).item()


METHOD = (
    "one Python process, the same module object for every system; BatchNorm running statistics measured on random inputs (experiments/python/workloads.py: calibrated) instead of the initial zeros and ones, under which some models' outputs do not depend on the input; output_spread: how much eager's outputs on the checked inputs differ (max-abs difference from the first over its max-abs value); eager_tf32_drift (float32): eager's own relative max-abs difference with TF32 off against PyTorch's defaults, the median over the checked inputs; the record's batch and dtype for every system "
    "(float32 with PyTorch's defaults, TF32 for cuDNN convolutions; or the module and float inputs cast to bfloat16 or float16), cuDNN benchmark on, fresh random inputs, CUDA events around each "
    "call on the current stream, from an idle device; every system prepared and kept, then timed in --rounds rounds, each round every system in turn (50 warm-ups, 100 timed calls; the order rotated by one each round): latency over all rounds' samples, median, and round_medians_us each round's median (their spread is the run's noise); relative_error: max-abs difference from eager's output over eager's max-abs value, the median over --checks fresh inputs (all in relative_errors; matches: the largest within the dtype's tolerance); rms_error: root-mean-square difference over eager's root-mean-square value, the median over the same inputs (all in rms_errors); cuda-graph: torch.cuda.graph of the whole forward after three warm-ups on a "
    "side stream; compile: torch.compile(mode='reduce-overhead'); max-autotune: torch.compile(mode='max-autotune') "
    "(each Inductor system's cudagraph_skips: the captures Inductor declined; --compile-seconds: a preparation past it is "
    "that system's failed row); nimble: nimble_rs.Nimble(model).prepare(x) "
    "(algorithm nimble, the inference rewrites on, layout chosen by measuring); backend: torch.compile(model, "
    "backend='nimble') with its defaults (granularity kernels: Inductor compiles the graph once and its kernels are planned; algorithm nimble; streams or Inductor's own program chosen by measuring); torch.compile and the backend each compile from empty caches (torch._inductor.utils.fresh_cache), "
    "after each compiled a small model once, before the first model (warm_up_compilers: the process's one-time costs charged to neither; records before it charged them to the first model's compile); peak_bytes: "
    "torch.cuda.max_memory_allocated during preparation and three calls, above what was allocated before"
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-json", required=True, help="nimble-bench models --json output")
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="all")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--compile-seconds", type=int, default=0, help="each compiler's limit on preparing a model (0: none)")
    parser.add_argument("--checks", type=int, default=5, help="fresh inputs each system's output is checked on")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, every system timed in each (the spread of their medians is the run's noise)")
    parser.add_argument("--save-torchscript", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--backend-variant", action="append", default=[], metavar="NAME=JSON",
                        help="one more system, backend-NAME: torch.compile(backend='nimble', options=JSON), timed beside the others")
    parser.add_argument("--compile-variant", action="append", default=[], metavar="NAME=JSON",
                        help="one more system, compile-NAME: reduce-overhead with these torch._inductor.config settings (torch.compile(options=...)), timed beside the others")
    args = parser.parse_args()
    args.device = "cuda"  # baselines.write_record's provenance reads it
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the same-process comparison runs on a GPU")
    if args.rounds < 1:
        raise SystemExit(f"error: --rounds {args.rounds}: expected at least 1 timing round")
    if args.checks < 1:
        raise SystemExit(f"error: --checks {args.checks}: expected at least 1 input to check outputs on")
    systems = [s.strip() for s in args.systems.split(",")]
    variants = {}
    for flag, prefix, items in (("--backend-variant", "backend", args.backend_variant), ("--compile-variant", "compile", args.compile_variant)):
        for item in items:
            name, _, options = item.partition("=")
            try:
                variants[f"{prefix}-{name}"] = json.loads(options)
            except json.JSONDecodeError as e:
                raise SystemExit(f"error: {flag} {item!r}: expected NAME=JSON options ({e})")
    systems += list(variants)
    unknown = [s for s in systems if s not in SYSTEMS and s not in variants]
    if unknown or systems[0] != "eager":
        raise SystemExit(f"error: systems {args.systems!r}: expected some of {SYSTEMS}, eager first (the reference)")
    save = dict(item.split("=", 1) for item in args.save_torchscript)

    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    everything = list(zoo) + COVERAGE_MODELS + DECODERS
    names = everything if args.models == "all" else [n.strip() for n in args.models.split(",")]
    if [n for n in names if n not in everything]:
        raise SystemExit(f"error: unknown models {[n for n in names if n not in everything]}; expected some of {everything}")

    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    reference = load_reference_module()
    print(f"compilers warmed up on a small model in {warm_up_compilers(systems, dtype, variants):.1f} s", file=sys.stderr, flush=True)
    rows, skipped = [], []
    for name in names:
        made = record_model(name, zoo, reference, args.batch, dtype, skipped)
        if made is None:
            continue
        model, make_input = made
        with torch.no_grad():
            try:
                # Several fresh inputs: one input's max-abs error is a noisy statistic, and
                # systems are compared on its median.
                checks = [(x, first_output(model(x)).clone()) for x in (make_input() for _ in range(args.checks))]
                spread = output_spread([expected for _, expected in checks])
                drift = tf32_drift(model, checks) if args.dtype == "float32" else None
            except Exception as e:  # the module itself fails: nothing to compare with
                skipped.append({"model": name, "reason": f"eager failed: {type(e).__name__}: {e}"})
                print(f"{name}: skipped (eager failed: {type(e).__name__}: {e})", file=sys.stderr, flush=True)
                continue
            # Every system is prepared and checked first and kept, then timed in rounds, each
            # round every system in turn (the order rotating), so that a drift of the machine
            # (clocks, another tenant, the host) falls on every system alike, and the spread of a
            # system's round medians is the run's measured noise.
            ready = {}

            def failed(system, e):  # one system failing must not lose the others
                rows.append({"model": name, "system": system, "dtype": args.dtype, "batch": args.batch, "error": f"{type(e).__name__}: {e}"})
                print(f"  {name:<16} {system:<11} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

            for system in systems:
                try:
                    run, seconds, notes = prepared(system, model, make_input, save.get(name), variants, args.compile_seconds)
                    errors, rms = [], []
                    for x, expected in checks:
                        got = run(x)
                        errors.append(relative_error(got, expected))
                        rms.append(rms_error(got, expected))
                    errors.sort()
                    rms.sort()
                except Exception as e:  # noqa: BLE001 - recorded as the system's failure
                    failed(system, e)
                    continue
                ready[system] = (run, seconds, notes, errors, rms)
            timings = timed_rounds({system: entry[0] for system, entry in ready.items()}, lambda: (make_input(),), args.warmup, args.iters, args.rounds)
            for system, (run, seconds, notes, errors, rms) in ready.items():
                if isinstance(timings[system], Exception):
                    failed(system, timings[system])
                    continue
                samples, round_medians = timings[system]
                error = errors[len(errors) // 2]
                latency = summary(samples)
                latency["round_medians_us"] = round_medians
                row = {"model": name, "system": system, "dtype": args.dtype, "batch": args.batch, "latency": latency, "prepare_seconds": seconds, "relative_error": error, "relative_errors": errors, "rms_error": rms[len(rms) // 2], "rms_errors": rms, "matches": errors[-1] <= TOLERANCE[args.dtype], "output_spread": spread, "eager_tf32_drift": drift, **notes}
                rows.append(row)
                rounds_apart = (max(round_medians) - min(round_medians)) / 1000
                print(f"  {name:<16} {system:<11} {latency['median_us'] / 1000:8.3f} ms  (rounds {rounds_apart:.3f} ms apart; prepare {seconds:.1f} s, rel.err {error:.1e} median of {len(errors)}, max {errors[-1]:.1e}, rms {rms[len(rms) // 2]:.2e}, peak {notes['peak_bytes'] / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
            del ready, timings
            torch._dynamo.reset()
            torch.cuda.synchronize()
        del model
        torch.cuda.empty_cache()
        write_record(args, "same-process", rows, skipped, METHOD)

    write_record(args, "same-process", rows, skipped, METHOD)
    print(f"{args.dtype}, batch {args.batch}")
    print(f"{'model':<16} " + " ".join(f"{s:>11}" for s in systems) + "   (ms, median)   nimble, backend vs compile: latency, error, rms error, prepare")
    for name in names:
        cells, by_system = [], {}
        for system in systems:
            hit = [r for r in rows if r["model"] == name and r["system"] == system and "latency" in r]
            if hit:
                by_system[system] = hit[0]
            cells.append(f"{by_system[system]['latency']['median_us'] / 1000:11.3f}" if system in by_system else f"{'-':>11}")

        def ratio(system, key):
            if {system, "compile"} <= set(by_system):
                value, base = key(by_system[system]), key(by_system["compile"])
                return f"{value / base:.2f}x" if base > 0 else "-"
            return "-"

        ratios = [
            "/".join(ratio(s, key) for key in (lambda r: r["latency"]["median_us"], lambda r: r["relative_error"], lambda r: r["rms_error"], lambda r: r["prepare_seconds"]))
            for s in ("nimble", "backend")
        ]
        by_round = round_ratios(by_system["backend"]["latency"], by_system["compile"]["latency"]) if {"backend", "compile"} <= set(by_system) else "-"
        print(f"{name:<16} " + " ".join(cells) + f"   {ratios[0]:>24} {ratios[1]:>24}   backend/compile by round: {by_round}")
        if {"backend", "max-autotune"} <= set(by_system):
            autotuned = by_system["max-autotune"]
            print(f"{'':<16} backend/max-autotune {by_system['backend']['latency']['median_us'] / autotuned['latency']['median_us']:.2f}x, "
                  f"by round: {round_ratios(by_system['backend']['latency'], autotuned['latency'])}; max-autotune prepared in "
                  f"{autotuned['prepare_seconds']:.0f} s, {autotuned.get('cudagraph_skips', 0)} captures skipped")
        for variant in variants:
            if {variant, "compile"} <= set(by_system):
                print(f"{'':<16} {variant}/compile {ratio(variant, lambda r: r['latency']['median_us'])}, error {ratio(variant, lambda r: r['relative_error'])}, by round: {round_ratios(by_system[variant]['latency'], by_system['compile']['latency'])}")


if __name__ == "__main__":
    main()
