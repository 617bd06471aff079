"""Where the backend's preparation peak goes on training_backend.py's encoder (a probe, on a GPU).

    python3 experiments/python/choice_memory_probe.py [eager] [compile] [backend]

Four SGD steps of the BERT-style encoder at batch 32 per system; for the backend each graph's
choice (NimbleCompiled._choose) is bracketed: memory allocated before it, its peak, allocated
after (absolute MiB). Step rows: the peak since the system started and what stays allocated,
above the base. (It resets PyTorch's peak statistics around each choice itself, so a step's
peak does not include the choices'.)"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import nimble_rs  # noqa: E402
from nimble_rs.dynamo import compiled as C  # noqa: E402
from training_backend import build, no_dropout, stepper  # noqa: E402

torch.backends.cudnn.benchmark = True
MiB = 2**20
log = []
choose_first = C.NimbleCompiled._choose


def choose(self, args, saved, static):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = choose_first(self, args, saved, static)
    torch.cuda.synchronize()
    log.append((self.kind, "choose", before / MiB, torch.cuda.max_memory_allocated() / MiB, torch.cuda.memory_allocated() / MiB))
    torch.cuda.reset_peak_memory_stats()
    return out


C.NimbleCompiled._choose = choose


def run(system):
    torch.manual_seed(0)
    model, make = build("encoder")
    model = no_dropout(model).cuda().train()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    runner = torch.compile(model, mode="reduce-overhead") if system == "compile" else torch.compile(model, backend="nimble") if system == "backend" else model
    step = stepper(runner, model)
    overall = 0
    for i in range(4):
        x, y = make(32)
        step(x, y)
        torch.cuda.synchronize()
        overall = max(overall, torch.cuda.max_memory_allocated())
        log.append((system, f"step {i}", base / MiB, (overall - base) / MiB, (torch.cuda.memory_allocated() - base) / MiB))
    del runner, step, model
    torch._dynamo.reset()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


for system in sys.argv[1:] or ["eager", "compile", "backend"]:
    run(system)
print(f"{'what':>10} {'when':>8} {'before MiB':>11} {'peak MiB':>9} {'after MiB':>10}")
for what, when, a, b, c in log:
    print(f"{what:>10} {when:>8} {a:11.0f} {b:9.0f} {c:10.0f}")
for r in nimble_rs.dynamo.reports():
    print(r["graph"], r.get("choice"), r.get("streams"), {k: r.get(k) for k in ("peak_bytes", "measured_peak_bytes")})
