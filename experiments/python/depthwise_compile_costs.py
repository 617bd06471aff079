"""The compile seconds of the depthwise kernel's variants (option ``depthwise_kernels``) and the
longest share of them when shared out to workers by each cost, as ``depthwise_ahead`` shares
them: by ``compile_cost`` (its unrolled operations), by their taps alone (what it used before)
and by the seconds measured (the best such sharing can do). The variants are those a
same-process record's depthwise convolutions need (the backend's ``shapes`` in the record:
kernel, stride, padding above and to the left, ReLU or not, the channels' vector width; each of
the tiles measured), compiled one by one for an sm_90 GPU on this machine's CPU (Triton's own
ptxas; no GPU needed), each from an empty cache. The record does not say a convolution's bias,
dilation or which affine terms it reads through: none, 1, and both where it reads through any.
With --formulation, the variants of that way of writing the kernel (``depthwise.FORMULATIONS``:
"unrolled", every tap, the default here, as the records before `fb141f8` ran it; "columns", the
kernel's columns a loop, also --column-loop; "by-size", the option's default since, a kernel
larger than 3x3 looped). With
--passes, the seconds of each compile's TritonGPUCoalesce pass too (MLIR's pass timing,
read from the compile's standard error): the pass that grows fastest with the kernel's unrolled
operations.

    python3 experiments/python/depthwise_compile_costs.py \\
        --record paper-figs/results/same-process-backend/e5208f2/same-process-backend-e5208f2-bfloat16-b1-nasnet-a-large-depthwise-default.json \\
        --model nasnet-a-large [--workers 15] [--arch 90] [--passes] [--formulation by-size]
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nimble-py" / "python"))

from nimble_rs.dynamo.passes.depthwise import FORMULATIONS, loops_columns, tiles  # noqa: E402
from nimble_rs.dynamo.passes.depthwise_ahead import compile_cost, kernel_constants, shared_out  # noqa: E402
from nimble_rs.dynamo.passes.depthwise_kernel import vector_width  # noqa: E402
from nimble_rs.dynamo.passes.depthwise_triton import kernel  # noqa: E402

TRITON_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def variants(record: dict, model: str, formulation: str = "unrolled"):
    """The record's variants of ``model`` (``depthwise.variants``' tuples, the device and dtype
    as names; the kernel written as ``formulation`` gives), each once."""
    rows = [r for r in record["rows"] if r["model"] == model and r["system"] == "backend"]
    if not rows:
        raise SystemExit(f"no backend row of {model} in the record (models: {sorted({r['model'] for r in record['rows']})})")
    found = []
    for graph in rows[0].get("backend_graphs") or []:
        for shape in (graph.get("depthwise_kernels") or {}).get("shapes", []):
            kh, kw = shape["kernel"]
            affine = bool(shape["affine_input"])
            for tile in tiles(kh * kw, loops_columns(kh * kw, formulation)):
                spec = ("cuda", rows[0]["dtype"], False, (affine, affine), (kh, kw), tuple(shape["stride"]), (shape["padding"][0], shape["padding"][2]), (1, 1), bool(shape["relu_input"]), tuple(tile), vector_width(shape["input"][1]))
                if spec not in found:
                    found.append(spec)
    if not found:
        raise SystemExit(f"the record's backend row of {model} measured no depthwise convolution (option depthwise_kernels off, or none there)")
    return found


def compile_seconds(spec, arch: int) -> float:
    """One variant compiled for ``arch`` as ``depthwise_ahead._warmup`` specializes it (pointers
    of the dtype, aligned; the sizes not specialized on; the rest constants): its seconds."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dtype, warps = spec[1], spec[9][3]
    fn = kernel()
    constants = kernel_constants(spec)
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name.endswith("_ptr"):
            signature[name], attrs[(i,)] = "*" + TRITON_DTYPES[dtype], [["tt.divisibility", 16]]
        elif name in constants:
            signature[name], constexprs[(i,)] = "constexpr", constants[name]
        else:
            signature[name] = "i32"
    started = time.perf_counter()
    triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    return time.perf_counter() - started


def coalesce_seconds(compile_one) -> tuple:
    """``compile_one()``'s result and the seconds MLIR's pass timing gives its TritonGPUCoalesce
    passes (what it prints to the standard error, file descriptor 2, read back)."""
    os.environ["MLIR_ENABLE_TIMING"] = "1"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            result = compile_one()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            del os.environ["MLIR_ENABLE_TIMING"]
        caught.seek(0)
        timing = caught.read()
    return result, sum(float(m.group(1)) for m in re.finditer(r"^\s*([0-9.]+) \(\s*[0-9.]+%\)\s+TritonGPUCoalesce$", timing, re.M))


def longest_share(specs, seconds, workers: int, cost) -> float:
    """The seconds of the longest share when ``depthwise_ahead.shared_out`` shares ``specs``
    out to ``workers`` by ``cost``."""
    taken = dict(zip(specs, seconds))
    return max(sum(taken[spec] for spec in share) for share in shared_out([(spec, spec) for spec in specs], workers, cost))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", required=True, type=Path)
    parser.add_argument("--model", required=True)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--passes", action="store_true", help="the seconds of each compile's TritonGPUCoalesce pass too")
    parser.add_argument("--formulation", choices=FORMULATIONS, default="unrolled", help="how the kernel is written (default: every tap unrolled)")
    parser.add_argument("--column-loop", action="store_const", dest="formulation", const="columns", help="--formulation columns")
    args = parser.parse_args()
    specs = variants(json.loads(args.record.read_text()), args.model, args.formulation)
    print(f"# {len(specs)} variants of {args.model} in {args.record.name}, compiled one by one for sm_{args.arch} on {os.cpu_count()} cores")
    print("kernel stride pad relu affine vec tile            cost  seconds" + ("  coalesce" if args.passes else ""))
    seconds, coalesce = [], []
    # (an empty cache, removed after, so that every variant is compiled: Triton reads the
    # variable at each compile)
    with tempfile.TemporaryDirectory(prefix="depthwise-compile-costs-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        for spec in specs:
            if args.passes:
                took, passes = coalesce_seconds(lambda: compile_seconds(spec, args.arch))
                seconds.append(took)
                coalesce.append(passes)
            else:
                seconds.append(compile_seconds(spec, args.arch))
            (kh, kw), stride, pad, relu, affine, tile, vec = spec[4], spec[5], spec[6], spec[8], spec[3][0], spec[9], spec[10]
            print(f"{kh}x{kw}    {stride[0]}      {pad[0]}   {relu!s:5} {affine!s:6} {vec}   {str(list(tile)):16} {compile_cost(spec):4}  {seconds[-1]:6.2f}" + (f"  {coalesce[-1]:8.2f}" if args.passes else ""), flush=True)
    measured, w = dict(zip(specs, seconds)), args.workers
    by = {"compile_cost": compile_cost, "taps": lambda spec: spec[4][0] * spec[4][1], "the seconds measured": measured.get}
    shares = {name: longest_share(specs, seconds, w, cost) for name, cost in by.items()}
    print(f"summed {sum(seconds):.2f} s, longest {max(seconds):.2f} s; the longest of {w} shares: by compile_cost {shares['compile_cost']:.2f} s, "
          f"by taps {shares['taps']:.2f} s, by the seconds measured {shares['the seconds measured']:.2f} s (at best {max(sum(seconds) / w, max(seconds)):.2f} s)")
    if args.passes:
        print(f"TritonGPUCoalesce {sum(coalesce):.2f} s of the {sum(seconds):.2f} s ({sum(coalesce) / sum(seconds):.0%})")


if __name__ == "__main__":
    main()
