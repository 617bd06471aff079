"""Training through `torch.compile(backend="nimble")` against `torch.compile(mode="reduce-overhead")`
and eager, in one Python process: a full SGD step (forward, cross-entropy loss, backward,
optimizer step) of ResNet-50 and MobileNetV2 at CIFAR-10 shapes (3x32x32, 10 classes) and of a
BERT-style transformer encoder (transformers' BertModel, 6 layers, hidden 768, 128 tokens, a
linear classifier on the first token), each system on its own copy of the same initial weights.

Per (model, batch, system): the first three steps are the preparation (compiling, capturing;
their wall time is `prepare_seconds`, from empty compiler caches for both compilers), each
checked against eager stepping its own copy on the same batch: the gradients' distance from
eager's (`grad_errors`: the norm of the difference over the norm of eager's, all parameters
together; `grad_error` the first step's, the one taken from the very same weights: deep
BatchNorm networks at initialization amplify the 1e-9 weight differences that one step of
rounding leaves into visibly different later gradients, eager against eager included, so later
steps show that sensitivity, not a system's accuracy). Then the paper's method: 50 warm-up steps, 100 timed
steps on fresh random inputs and labels, CUDA events around each step, median; in rounds, every
system timed in each round (the order rotating), so that the spread of the round medians is the
run's noise. Dropout is off
(p = 0) in every model, so that eager and the compiled steps compute the same function.

    python3 experiments/python/training_backend.py --out OUT.json [--models resnet50,mobilenet-v2,encoder]
        [--batches 32,64,128] [--systems eager,compile,backend] [--warmup 50] [--iters 100] [--rounds 3] [--commit SHA]
"""

import argparse
import copy
import os
import sys
import time

import torch
from torch._inductor.utils import fresh_cache

from baselines import CIFAR_MODELS, relative_norm, round_ratios, sgd, sgd_step, summary, timed_rounds, write_record

SYSTEMS = ["eager", "compile", "backend"]
MODELS = ["resnet50", "mobilenet-v2", "encoder"]


class Encoder(torch.nn.Module):
    """transformers' BertModel (6 layers, hidden 768, 12 heads) and a classifier on the first
    token: token ids in, logits out."""

    def __init__(self, classes=10):
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(num_hidden_layers=6, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, return_dict=False, use_cache=False)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.head = torch.nn.Linear(config.hidden_size, classes)
        self.vocabulary = config.vocab_size

    def forward(self, ids):
        return self.head(self.bert(ids)[0][:, 0])


def build(name):
    """(model, make_batch) for one model."""
    if name == "encoder":
        model = Encoder()
        return model, lambda batch: (torch.randint(0, model.vocabulary, (batch, 128), device="cuda"), torch.randint(10, (batch,), device="cuda"))
    import torchvision.models as tv

    model = getattr(tv, CIFAR_MODELS[name])(num_classes=10)
    return model, lambda batch: (torch.randn(batch, 3, 32, 32, device="cuda"), torch.randint(10, (batch,), device="cuda"))


def no_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def stepper(run, model):
    """One SGD step of ``model`` through ``run`` (baselines.sgd_step), its optimizer made here and kept
    as ``step.optimizer``."""
    optimizer = sgd(model.parameters())

    def step(x, y):
        sgd_step(run, optimizer, x, y)

    step.optimizer = optimizer
    return step


def grad_error(model, reference):
    return relative_norm([p.grad for p in model.parameters()], [p.grad for p in reference.parameters()])


def prepared(system, initial, make_batch, batch):
    """The step function of `system` on its own copy of `initial`, its preparation's seconds,
    the gradient error of its first three steps against eager, and notes."""
    model = copy.deepcopy(initial)
    shadow = copy.deepcopy(initial)
    shadow_step = stepper(shadow, shadow)
    notes = {}
    context = fresh_cache(delete=False) if system != "eager" else None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    if system == "eager":
        run = model
    elif system == "compile":
        run = torch.compile(model, mode="reduce-overhead")
    elif system == "backend":
        import nimble_rs

        before = len(nimble_rs.dynamo.reports())
        run = torch.compile(model, backend="nimble")
    else:
        raise SystemExit(f"unknown system {system!r}; expected one of {SYSTEMS}")
    step = stepper(run, model)
    seconds, errors = 0.0, []
    if context is not None:
        context.__enter__()
    try:
        for _ in range(3):
            x, y = make_batch(batch)
            shadow_step(x, y)
            torch.cuda.synchronize()
            started = time.time()
            step(x, y)
            torch.cuda.synchronize()
            seconds += time.time() - started
            errors.append(grad_error(model, shadow))
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    notes["peak_bytes"] = torch.cuda.max_memory_allocated() - base
    if system == "backend":
        keep = ("graph", "granularity", "kernels", "streams", "syncs", "choice", "reason", "measured_ms", "measured_error", "measured_spread", "compile_seconds", "inductor_seconds", "capture_seconds", "uncaptured_calls", "uncapturable", "unplanned", "gradients", "shared_buffers", "shared_kept_to_end", "weight_stream_kernels", "weight_stream_left")
        notes["backend_graphs"] = [{k: r[k] for k in keep if k in r} for r in nimble_rs.dynamo.reports()[before:]]
    return step, seconds, errors, notes


METHOD = (
    "one Python process; SGD lr 0.01 momentum 0.9 weight decay 5e-4 (PyTorch's default foreach implementation), cross-entropy on random labels, dropout off; "
    "float32 with PyTorch's defaults (TF32 for cuDNN convolutions), cuDNN benchmark on; each system on its own copy of the same initial weights; "
    "prepare_seconds: the first three steps' wall time (compiling and capturing), each compiler from empty caches (torch._inductor.utils.fresh_cache); "
    "grad_errors: per prepared step, the norm of (gradients - eager's gradients on an own copy stepped on the same batch) over the norm of eager's, all parameters together; grad_error: the first step's (from identical weights; later steps start from weights a step's rounding apart, which deep BatchNorm networks at initialization amplify: see the eager row, eager against eager); "
    "step: every system prepared and kept, then timed in --rounds rounds, each round every system in turn (the order rotated by one each round): 50 warm-up steps, 100 timed steps on fresh random inputs and labels, CUDA events around each step from an idle device; median over all rounds' samples, round_medians_us each round's median (their spread is the run's noise); "
    "compile: torch.compile(mode='reduce-overhead') of the model (the optimizer eager, as for every system); backend: torch.compile(model, backend='nimble') with its defaults; "
    "peak_bytes: torch.cuda.max_memory_allocated during the three prepared steps, above what was allocated before"
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="32,64,128")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, every system timed in each (the spread of their medians is the run's noise)")
    parser.add_argument("--commit", default=os.environ.get("NIMBLE_COMMIT", "unknown"))
    args = parser.parse_args()
    args.device = "cuda"
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the training comparison runs on a GPU")
    names = [n.strip() for n in args.models.split(",")]
    systems = [s.strip() for s in args.systems.split(",")]
    if [n for n in names if n not in MODELS] or [s for s in systems if s not in SYSTEMS]:
        raise SystemExit(f"error: models {args.models!r}, systems {args.systems!r}: expected some of {MODELS} and {SYSTEMS}")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        raise SystemExit(f"error: --batches {args.batches!r}: expected comma-separated integers")
    torch.backends.cudnn.benchmark = True
    rows = []
    for name in names:
        for batch in batches:
            if name == "encoder" and batch != batches[0]:
                continue  # one transformer encoder cell, at the first batch
            torch.manual_seed(0)
            initial, make_batch = build(name)
            initial = no_dropout(initial).cuda().train()
            # Every system prepared and kept, then timed in rounds (every system in each, the
            # order rotating): the spread of a system's round medians is the run's noise.
            ready = {}

            def failed(system, e):  # one system failing must not lose the others
                rows.append({"model": name, "batch": batch, "system": system, "error": f"{type(e).__name__}: {e}"})
                print(f"  {name:<14} b{batch:<4} {system:<8} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

            for system in systems:
                try:
                    ready[system] = prepared(system, initial, make_batch, batch)
                except Exception as e:  # noqa: BLE001 - recorded as the system's failure
                    failed(system, e)
            timings = timed_rounds({system: entry[0] for system, entry in ready.items()}, lambda: make_batch(batch), args.warmup, args.iters, args.rounds)
            for system, (step, seconds, errors, notes) in ready.items():
                if isinstance(timings[system], Exception):
                    failed(system, timings[system])
                    continue
                samples, round_medians = timings[system]
                latency = summary(samples)
                latency["round_medians_us"] = round_medians
                row = {"model": name, "batch": batch, "system": system, "step": latency, "prepare_seconds": seconds, "grad_errors": errors, "grad_error": errors[0], **notes}
                rows.append(row)
                print(f"  {name:<14} b{batch:<4} {system:<8} {row['step']['median_us'] / 1000:8.3f} ms  (rounds {(max(round_medians) - min(round_medians)) / 1000:.3f} ms apart; prepare {seconds:.1f} s, grad error {errors[0]:.1e}, peak {notes['peak_bytes'] / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
            del ready, timings
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            write_record(args, "training-backend", rows, [], METHOD)
    write_record(args, "training-backend", rows, [], METHOD)
    print(f"{'model':<14} {'batch':>5} " + " ".join(f"{s:>10}" for s in systems) + "   (step ms, median)   backend vs compile: step, grad error, prepare")
    for name in names:
        for batch in batches:
            hit = {r["system"]: r for r in rows if r["model"] == name and r["batch"] == batch and "step" in r}
            if not hit:
                continue
            cells = [f"{hit[s]['step']['median_us'] / 1000:10.3f}" if s in hit else f"{'-':>10}" for s in systems]
            ratio = "-"
            if {"backend", "compile"} <= set(hit):
                b, c = hit["backend"], hit["compile"]
                by_round = round_ratios(b["step"], c["step"])
                ratio = f"{b['step']['median_us'] / c['step']['median_us']:.2f}x (by round {by_round}) / {b['grad_error']:.1e} vs {c['grad_error']:.1e} / {b['prepare_seconds'] / c['prepare_seconds']:.2f}x"
            print(f"{name:<14} {batch:>5} " + " ".join(cells) + f"   {ratio}")


if __name__ == "__main__":
    main()
