"""Where the backend's preparation peak goes on training_backend.py's encoder (a probe, on a GPU).

    python3 experiments/python/probes/choice_memory_probe.py [eager] [compile] [backend]

Four SGD steps of the BERT-style encoder at batch 32 per system. For the backend, each graph's
compile, each capture (the choice and the graph kept) and each choice within it is bracketed
(the backend's phases "compile", "capture" and "choice", watched: nimble_rs.dynamo.watch): memory allocated
before it, its peak, allocated after (absolute MiB). Step rows: the peak since the system
started and what stays allocated, above the base. Brackets nest: each resets PyTorch's peak
statistics where it starts and ends, and hands its peak on to the bracket around it and to the
step rows, so every row's peak includes what happened inside it."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the shared modules, one folder up

import torch  # noqa: E402

import nimble_rs  # noqa: E402
from training_backend import build, no_dropout, stepper  # noqa: E402

torch.backends.cudnn.benchmark = True
MiB = 2**20
log = []
# The peak of each open bracket so far (the innermost last), its inner brackets' included; the
# first entry is the running system's.
open_peaks = [0]


# The phases bracketed, as the rows name them; and the memory allocated when each open one began.
BRACKETED = {"compile": "compile", "capture": "capture", "choice": "choose"}
began = []


def bracket(name, moment, kind):
    """A watcher of the backend's phases: a row (the graph's kind, the phase, before, peak, after)
    per bracketed phase."""
    if name not in BRACKETED:
        return
    torch.cuda.synchronize()
    if moment == "start":
        began.append(torch.cuda.memory_allocated())
        open_peaks[-1] = max(open_peaks[-1], torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
        open_peaks.append(0)
        return
    before = began.pop()
    peak = max(open_peaks.pop(), torch.cuda.max_memory_allocated())
    open_peaks[-1] = max(open_peaks[-1], peak)
    log.append((kind or "graph", BRACKETED[name], before / MiB, peak / MiB, torch.cuda.memory_allocated() / MiB))
    torch.cuda.reset_peak_memory_stats()


nimble_rs.dynamo.watch(bracket)


def run(system):
    torch.manual_seed(0)
    model, make = build("encoder")
    model = no_dropout(model).cuda().train()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    open_peaks[:] = [0]
    runner = torch.compile(model, mode="reduce-overhead") if system == "compile" else torch.compile(model, backend="nimble") if system == "backend" else model
    step = stepper(runner, model)
    overall = 0
    for i in range(4):
        x, y = make(32)
        step(x, y)
        torch.cuda.synchronize()
        overall = max(overall, torch.cuda.max_memory_allocated(), open_peaks[0])
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
