"""Half precision over the families: how far each system's output is from eager's in bfloat16 and
float16, model by model, beside how far the dtype itself moves eager from float32.

For each model of the exporter's family sets (experiments/python/export_torchscript.py:
`torchvision-families`, `transformers-families`; the static ones, named with --models), in one
Python process on one GPU: the model is built as the exporter builds it (random weights made
informative the same way: all-zero matrices drawn, BatchNorm statistics measured on random
batches), then for each dtype a copy of it and its float inputs are cast, and eager PyTorch,
`torch.compile(mode="reduce-overhead")` and `nimble_rs.Nimble(model).prepare(...)` each run
--checks fresh random inputs. Per system: the relative max-abs difference from eager's output
(max |got - eager| / max |eager|) and the root-mean-square one, the median over the inputs; per
model and dtype: eager's own distance from the float32 model on the same inputs (the rounding
the dtype costs, against which a system's drift is read), and per system its output's distance
from the float32 model's (vs_float32: a system further from eager may be nearer the truth). No timing. The record is rewritten
after every model, so a run cut short keeps what it measured.

    python3 experiments/python/half_precision.py --out OUT.json --models a,b,... \
        [--dtypes bfloat16,float16] [--checks 3] [--seconds S] [--commit SHA]
"""

import argparse
import copy
import gc
import sys
import time

import torch

from baselines import first_output, write_record
from export_torchscript import family_models, informative_weights, torchvision_family_models

SYSTEMS = ["compile", "nimble"]
# Nimble with one of its stages changed, to find where a drift comes from (--systems): the
# rewrites off, one stream, the NCHW layout forced, the rewritten forward run op by op without a
# graph, and the traced module's own forward op by op.
VARIANTS = {
    "nimble-no-rewrites": dict(optimize=False),
    "nimble-one-stream": dict(algorithm="single"),
    "nimble-nchw": dict(channels_last=False),
}
OP_BY_OP = ["nimble-rewritten-op-by-op", "nimble-traced-op-by-op"]
# PyTorch's own TorchScript stages Nimble's optimization starts from, without Nimble: the module
# traced as nimble_rs traces it and frozen, then its linear layers that share an input merged
# into one (FrozenConcatLinear, which PyTorch's freezing runs on a GPU in any dtype).
TORCHSCRIPT = ["torchscript-frozen", "torchscript-frozen-concat"]


def torchscript_run(system, model, example):
    traced = torch.jit.trace(model, tuple(example), strict=False, check_trace=False)
    frozen = torch.jit._recursive.wrap_cpp_module(torch._C._freeze_module(traced._c))
    if system == "torchscript-frozen-concat":
        torch._C._jit_pass_concat_frozen_linear(frozen.graph)
    return frozen
METHOD = (
    "one Python process; each model built as experiments/python/export_torchscript.py builds it (informative_weights), at batch 1 and the exporter's input sizes; "
    "per dtype, a copy of the float32 model and its float inputs cast (integer inputs kept); eager, torch.compile(mode='reduce-overhead') and nimble_rs.Nimble(model).prepare(...) "
    "(algorithm nimble, rewrites on) run --checks fresh random inputs each (float inputs N(0,1), token ids uniform over the vocabulary); relative_error: max-abs difference from eager's "
    "output over eager's max-abs value, the median over the inputs (all in relative_errors); rms_error: root-mean-square difference over eager's root-mean-square value, the median; "
    "eager_vs_float32: the same two measures of eager in the dtype against the float32 model on the same inputs, vs_float32 those of the system's output; cuDNN benchmark on; no timing"
)


def fresh(spec_text, device):
    """A random tensor as the exporter's input spec describes it ("1x3x224x224:float32", or
    "1x128:int64:LOW:HIGH" for token ids)."""
    parts = spec_text.split(":")
    shape = [int(d) for d in parts[0].split("x")]
    if parts[1] == "int64":
        return torch.randint(int(parts[2]), int(parts[3]), shape, device=device)
    return torch.randn(shape, device=device)


def distances(got, expected):
    got, expected = first_output(got).float(), first_output(expected).float()
    relative = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()
    rms = (((got - expected) ** 2).mean().sqrt() / (expected**2).mean().sqrt().clamp_min(1e-30)).item()
    return relative, rms


def median(values):
    return sorted(values)[len(values) // 2]


def system_run(system, model, example):
    if system == "compile":
        run = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            run(*example)
        return run
    if system in TORCHSCRIPT:
        return torchscript_run(system, model, example)
    import nimble_rs

    nimble = nimble_rs.Nimble(model)
    if system == "nimble-rewritten-op-by-op":
        return lambda *x: nimble.run_optimized(*x)[0]
    if system == "nimble-traced-op-by-op":
        return nimble.eager
    nimble.prepare(*example, **VARIANTS.get(system, {}))
    return nimble.forward_owned


def measure(name, source, model, specs, dtypes, checks, device, rows, systems):
    inputs = [[fresh(s, device) for s in specs] for _ in range(checks)]
    with torch.no_grad():
        in_float32 = [first_output(model(*x)).float().clone() for x in inputs]
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        cast = copy.deepcopy(model).to(dtype).eval()
        typed = [[t.to(dtype) if t.is_floating_point() else t for t in x] for x in inputs]
        with torch.no_grad():
            expected = [first_output(cast(*x)).clone() for x in typed]
            own = [distances(e, f) for e, f in zip(expected, in_float32)]
            base = {"model": name, "source": source, "dtype": dtype_name, "eager_vs_float32": {"relative_error": median([d[0] for d in own]), "rms_error": median([d[1] for d in own])}}
            for system in systems:
                row = dict(base, system=system)
                started, run = time.time(), None
                try:
                    run = system_run(system, cast, typed[0])
                    outputs = [first_output(run(*x)).clone() for x in typed]
                    found = [distances(o, e) for o, e in zip(outputs, expected)]
                    row.update(relative_error=median([d[0] for d in found]), relative_errors=sorted(d[0] for d in found), rms_error=median([d[1] for d in found]))
                    truth = [distances(o, f) for o, f in zip(outputs, in_float32)]
                    row["vs_float32"] = {"relative_error": median([d[0] for d in truth]), "rms_error": median([d[1] for d in truth])}
                except Exception as e:  # noqa: BLE001 - recorded as the system's failure
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                row["seconds"] = time.time() - started
                rows.append(row)
                shown = f"{row['relative_error']:.2e} (rms {row['rms_error']:.2e})" if "relative_error" in row else f"failed: {row['error']}"
                print(f"  {name:<28} {dtype_name:<9} {system:<8} {shown}; eager vs float32 {base['eager_vs_float32']['relative_error']:.2e}", file=sys.stderr, flush=True)
                del run
                torch._dynamo.reset()
        del cast
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", required=True, help="comma-separated names of the family sets' models")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--checks", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {SYSTEMS + list(VARIANTS) + OP_BY_OP + TORCHSCRIPT}")
    parser.add_argument("--seconds", type=float, default=float("inf"), help="start no model after this many seconds")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (nimble_rs.Nimble needs CUDA; its rows then hold its error)")
    args = parser.parse_args()
    args.warmup, args.iters = 0, 0  # write_record's provenance reads them
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the half-precision comparison runs on a GPU (--device cpu for a smoke test)")
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    if not dtypes or [d for d in dtypes if d not in ("bfloat16", "float16")]:
        raise SystemExit(f"error: --dtypes {args.dtypes!r}: expected bfloat16 and/or float16")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    known = SYSTEMS + list(VARIANTS) + OP_BY_OP + TORCHSCRIPT
    if not systems or [s for s in systems if s not in known]:
        raise SystemExit(f"error: --systems {args.systems!r}: expected some of {known}")
    if args.checks < 1:
        raise SystemExit(f"error: --checks {args.checks}: expected at least 1")
    builders = {name: (build, source) for name, build, source in [*torchvision_family_models(1), *family_models(1)]}
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in builders]
    if unknown:
        raise SystemExit(f"error: unknown models {unknown}; expected some of {sorted(builders)}")
    torch.backends.cudnn.benchmark = True
    started = time.time()
    rows, skipped = [], []
    for name in names:
        if time.time() - started > args.seconds:
            skipped.append({"model": name, "reason": f"not started: past --seconds {args.seconds:.0f}"})
            continue
        build, source = builders[name]
        torch.manual_seed(0)
        model, example, specs = build()
        model = model.to(args.device).eval()
        informative_weights(model, [t.to(args.device) for t in example])
        try:
            measure(name, source, model, specs, dtypes, args.checks, args.device, rows, systems)
        except Exception as e:  # noqa: BLE001 - eager itself failed: nothing to compare with
            skipped.append({"model": name, "reason": f"{type(e).__name__}: {e}"})
        del model
        gc.collect()
        write_record(args, "half-precision", rows, skipped, METHOD)
    write_record(args, "half-precision", rows, skipped, METHOD)
    print(f"{'model':<28} {'dtype':<9} {'eager-fp32':>10} " + " ".join(f"{s:>{max(10, len(s))}}" for s in systems) + "  nimble <= compile")
    for name in names:
        for dtype in dtypes:
            cells = {r["system"]: r for r in rows if r["model"] == name and r["dtype"] == dtype}
            if not cells:
                continue
            value = {s: cells[s].get("relative_error") if s in cells else None for s in systems}
            shown = [f"{v:{max(10, len(s))}.2e}" if v is not None else f"{'-':>{max(10, len(s))}}" for s, v in value.items()]
            own = next(iter(cells.values()))["eager_vs_float32"]["relative_error"]
            pair = [value.get("nimble"), value.get("compile")]
            verdict = "-" if None in pair else "yes" if pair[0] <= pair[1] else "NO"
            print(f"{name:<28} {dtype:<9} {own:10.2e} {' '.join(shown)}  {verdict}")


if __name__ == "__main__":
    main()
