"""What folding the weights buys at batch 16: the same-process models under
torch.compile(mode="reduce-overhead") with and without Inductor's freezing
(`torch._inductor.config.freezing`: parameters become constants, BatchNorm folds into the
convolutions), `backend="nimble"` with and without it, and `nimble_rs.Nimble` (which folds
BatchNorm and runs cuDNN's convolution with bias and ReLU in one kernel), in one process. A probe
for the backend's next step, not a record of the backend: one round, the paper's timing method
(cuDNN benchmark on, 50 warm-ups, the median of 100 CUDA-event timings, each call from an idle
device, fresh random inputs), and each system's relative max-abs distance from eager on one
fresh input.

    python3 experiments/python/probes/freezing_probe.py --models-json MODELS.json --models googlenet,inception-v3 \
        [--batch 16] [--dtype float32]
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared modules, one folder up
from baselines import load_reference_module, measure
from workloads import model_and_inputs, probe_parser

SYSTEMS = ["compile", "compile-frozen", "backend", "backend-frozen", "nimble"]


def prepared(system, model, example):
    """A function of the input for `system`; compiling and capturing happen here."""
    import nimble_rs

    torch._dynamo.reset()
    torch._inductor.config.freezing = system.endswith("-frozen")
    if system.startswith("compile"):
        run = torch.compile(model, mode="reduce-overhead")
    elif system.startswith("backend"):
        run = torch.compile(model, backend="nimble")
    else:
        nimble = nimble_rs.Nimble(model)
        nimble.prepare(example)
        run = nimble
    with torch.no_grad():
        for _ in range(3):
            run(example)
    torch.cuda.synchronize()
    return run


def main():
    parser = probe_parser(__doc__)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    zoo = {m["name"]: m for m in json.loads(Path(args.models_json).read_text())}
    reference = load_reference_module()
    print(f"{'model':<14} {'system':<15} {'ms':>8} {'vs compile':>10} {'from eager':>10}", flush=True)
    for name in args.models.split(","):
        made = model_and_inputs(name, zoo, reference, args.batch, dtype, [])
        if made is None:
            continue
        model, one = made
        make = lambda one=one: (one(),)  # noqa: E731
        model = model.cuda().eval().to(dtype)
        check = make()[0]
        with torch.no_grad():
            expected = model(check).float()
        base = None
        for system in SYSTEMS:
            try:
                run = prepared(system, model, make()[0])
                with torch.no_grad():
                    got = run(check)
                    error = ((got.float() - expected).abs().max() / expected.abs().max()).item()
                    samples = measure(run, make, 50, 100, "cuda")
            except Exception as e:  # noqa: BLE001 - one system failing must not lose the others
                print(f"{name:<14} {system:<15} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
                continue
            finally:
                torch._inductor.config.freezing = False
            ms = sorted(samples)[len(samples) // 2] / 1000.0
            base = ms if system == "compile" else base
            ratio = f"{ms / base:.2f}" if base else "-"
            print(f"{name:<14} {system:<15} {ms:8.3f} {ratio:>10} {error:10.1e}", flush=True)
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
