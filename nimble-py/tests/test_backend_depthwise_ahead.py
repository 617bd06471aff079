"""Option ``depthwise_kernels``' compiles ahead (``nimble_rs.dynamo.passes.depthwise_ahead``) on the
CPU: Triton compiles the kernel's variants for an sm_90 GPU here (its own ptxas), in worker
processes keyed as the backend's process keys them, or on threads; workers that fail compile
nothing; the variants shared out by their compile cost; and the experiment that compiles a
record's variants (experiments/python/depthwise_compile_costs.py)."""

import json
import os

import pytest
import torch

from nimble_rs.dynamo.passes import depthwise_ahead
from conftest import triton_of_the_engines_torch

AHEAD_SCRIPT = """
import contextlib, json, os, sys
import torch, triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import compute_cache_key

class Hopper:
    # Triton's driver as far as a compile without a launch asks it: an sm_90 GPU
    get_current_target = staticmethod(lambda: GPUTarget("cuda", 90, 32))
    get_current_device = staticmethod(lambda: 0)
    get_current_stream = staticmethod(lambda device=None: 0)
    get_active_torch_device = staticmethod(lambda: torch.device("cpu"))

driver.set_active(Hopper())
torch.cuda.device = lambda device: contextlib.nullcontext()
from nimble_rs.dynamo.passes import depthwise, depthwise_ahead, depthwise_kernel, depthwise_triton
from triton.backends.nvidia.compiler import CUDABackend
cuda = torch.device("cuda", 0)
depthwise_ahead.PROCESSES, depthwise_ahead.PROCESSES_FROM, depthwise_ahead.PROCESSES_FROM_CORES = int(sys.argv[2]), 2, 1
# (as many workers as asked for: a core each, and one more for this process)
depthwise_ahead._cores = lambda: int(sys.argv[2]) + 1
if sys.argv[3] == "ptxas-changed":
    # As Inductor can leave it: the ptxas version this process read first (Triton's own, held
    # in its key) no longer the ptxas the environment names (torch's), which a new process reads.
    from triton.backends.nvidia import compiler as nvidia
    nvidia.get_ptxas_version(90)
    os.environ["TRITON_PTXAS_PATH"] = os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")
if sys.argv[3] == "no-worker":
    sys.executable = "/nonexistent/python"   # no worker can start: everything compiled here
# compiles in this process, counted: where workers compiled, this process only loads
compiled_here = []
make_ttgir = CUDABackend.make_ttgir
CUDABackend.make_ttgir = staticmethod(lambda *a, **k: compiled_here.append(1) or make_ttgir(*a, **k))
specs = [(cuda, torch.float32, bias, (bias, bias), (k, k), (s, s), (p, p), (1, 1), bias, tuple(t), 4) for k, s, p, bias, loop in json.loads(sys.argv[1]) for t in depthwise.tiles(k * k, loop)]
def launched_keys_found():
    kernel = depthwise_triton.kernel()
    cache, key_cache, _, _, binder = kernel.device_caches[0]
    found = []
    for k, s, p, bias, loop in json.loads(sys.argv[1]):
        # what triton_depthwise launches for a channels-last [2, 24, 20, 20] input: its cache key
        x = torch.randn(2, 24, 20, 20).contiguous(memory_format=torch.channels_last)
        taps, b = torch.randn(k * k, 24), torch.randn(24)
        out = depthwise_kernel.output_size(20, 20, k, k, (s, s), (p, p), (1, 1))
        for rows, bw, bc, warps, *column_loop in depthwise.tiles(k * k, loop):
            # (the prologue, factor, term and ReLU, with the bias here: both kinds of flag in two variants)
            vector = b if bias else taps
            args = (x, taps, vector, vector, vector, torch.empty(1), 20, 20, 6, out[0], out[1], -(-out[0] // rows), -(-out[1] // bw), s, s, p, p, 1, 1, k, k, bias, bias, bias, bias, rows, bw, bc, 4, bool(column_loop))
            _, specialization, options = binder(*args, num_warps=warps, debug=kernel.debug or knobs.runtime.debug, instrumentation_mode=knobs.compilation.instrumentation_mode)
            found.append(compute_cache_key(key_cache, specialization, options) in cache)
    return found

# compiled, then (a new process's kernel) loaded from Triton's cache on disk: the loads, being
# quick, all start at once
runs = []
for _ in range(2):
    depthwise_triton._KERNEL.clear()
    runs.append([depthwise_ahead.compile_ahead(specs), launched_keys_found(), len(compiled_here)])
    compiled_here.clear()
print(json.dumps(runs))
"""


@triton_of_the_engines_torch()
@pytest.mark.parametrize("processes,environment", [(2, "as-read"), (2, "ptxas-changed"), (2, "no-worker"), (1, "as-read")])
def test_compiling_ahead_makes_the_variants_the_launches_use(tmp_path, processes, environment):
    # Triton compiles for an sm_90 GPU here (its ptxas), with a stand-in for the driver; the
    # launches' cache keys, as Triton computes them from the real arguments, must find them.
    # In two worker processes, this one then only loading them, even where the ptxas its Triton
    # keys on is no longer the environment's; or in this one, on threads, where no worker can
    # start (said in the report) or none is wanted.
    triton = pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no NVIDIA backend to compile with")
    if environment == "ptxas-changed" and not (Path(torch.__file__).parent / "bin" / "ptxas").exists():
        pytest.skip("this torch has no ptxas of its own")
    # (the second's tiles those whose kernel columns are a loop)
    cases = [(5, 1, 2, False, False), (7, 2, 0, True, True)]
    # (Triton's cache a new one: compiles, not loads, run side by side)
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", AHEAD_SCRIPT, json.dumps(cases), str(processes), environment], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for round, (counts, found, compiled_here) in enumerate(json.loads(done.stdout.strip().splitlines()[-1])):
        seconds = counts.pop("variant_seconds")
        if environment == "no-worker":
            assert counts.pop("processes")["failed"].startswith("no worker started (FileNotFoundError"), counts
        elif processes > 1:
            spent = [counts["processes"].pop(k) for k in ("seconds", "startup_seconds", "loaded_seconds")]
            assert all(s >= 0 for s in spent), spent
        assert counts == ({"compiled_ahead": 4, "processes": {"workers": 2, "compiled": 4, "compiled_here": 0}} if processes > 1 and environment != "no-worker" else {"compiled_ahead": 4}), counts
        # (the second round loads from Triton's cache: hundredths of a second)
        assert 0 <= seconds["longest"] <= seconds["sum"], seconds
        assert found == [True] * 4, found
        assert compiled_here == (4 if (processes == 1 or environment == "no-worker") and round == 0 else 0), compiled_here


def test_a_worker_that_prints_no_results_fails_or_runs_past_the_limit_compiles_nothing(monkeypatch):
    # Its share is then compiled in the backend's process (Ahead.finish); the wait stops the one
    # past WORKER_SECONDS and leaves no worker running and no job folder behind.
    import subprocess
    import sys
    import tempfile
    import time

    monkeypatch.setattr(depthwise_ahead, "WORKER_SECONDS", 3)
    scripts = ["print('not results')", "import sys; sys.exit(3)", "import time; time.sleep(60)", "import json, time; print(json.dumps({'started': time.time(), 'results': [[True, 0.5], [False, 0.25]]}))"]
    folder = tempfile.TemporaryDirectory(prefix="nimble-depthwise-test-")
    running = [(subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), time.time()) for script in scripts]
    started = time.perf_counter()
    found = depthwise_ahead._Workers(running, folder).wait()
    assert time.perf_counter() - started < 30
    assert (found["workers"], found["compiled"], found["seconds"]) == (4, 1, [0.5, 0.25]), found
    assert 0 <= found["startup_seconds"] < 30, found
    assert all(worker.poll() is not None for worker, _ in running)
    assert not os.path.exists(folder.name)


def test_the_variants_are_shared_out_by_their_unrolled_operations():
    # A tile of more output rows is a longer compile (NASNet-A large's 5x5: 1.5-2.5 s against
    # 0.8-1.5 s here) though its taps are the same; a 7x7 at stride 2 reads more input rows.
    def spec(size, stride, tile):
        return ("cuda", torch.bfloat16, False, (False, False), (size, size), (stride, stride), (0, 0), (1, 1), False, tile, 4)

    five_tall, five, seven_s2, seven_s1, three = spec(5, 1, (8, 8, 64, 4)), spec(5, 1, (4, 16, 32, 4)), spec(7, 2, (4, 8, 32, 4)), spec(7, 1, (4, 8, 32, 4)), spec(3, 1, (4, 16, 32, 4))
    cost = depthwise_ahead.compile_cost
    assert cost(seven_s2) > cost(seven_s1) > cost(five_tall) > cost(five) > cost(three) > 0
    # (by rows read and multiply-adds: 13 rows of 7 taps and 4 x 49; 11 of 5 and 8 x 25)
    assert (cost(seven_s2), cost(five_tall)) == (13 * 7 + 4 * 49, 12 * 5 + 8 * 25)
    # (its kernel columns a loop: one column's loads and multiply-adds unrolled)
    assert cost(seven_s2[:9] + ((4, 8, 32, 4, 1),) + seven_s2[10:]) == 13 + 4 * 7
    group = [(three, "three"), (five, "five"), (seven_s2, "seven_s2"), (five_tall, "five_tall"), (seven_s1, "seven_s1")]
    assert depthwise_ahead.shared_out(group, 2) == [["seven_s2", "five", "three"], ["seven_s1", "five_tall"]]
    assert depthwise_ahead.shared_out(group[:2], 4) == [["five"], ["three"]]


def test_the_compile_costs_experiment_compiles_a_records_variants_without_a_gpu(tmp_path):
    # experiments/python/depthwise_compile_costs.py on a record of two depthwise convolutions
    # (the shapes the backend reports): each tile of each compiled for sm_90 on the CPU.
    import subprocess
    import sys
    from pathlib import Path

    shape = {"input": [1, 8, 12, 12], "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1, 1, 1], "affine_input": False, "relu_input": True}
    shapes = [shape, {**shape, "input": [1, 6, 12, 12], "stride": [2, 2], "relu_input": False}]
    rows = [{"model": "tiny", "system": "backend", "dtype": "bfloat16", "backend_graphs": [{"depthwise_kernels": {"shapes": shapes}}]}]
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"rows": rows}))
    script = Path(__file__).resolve().parents[2] / "experiments" / "python" / "depthwise_compile_costs.py"
    done = subprocess.run([sys.executable, str(script), "--record", str(record), "--model", "tiny", "--workers", "2", "--passes"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# 4 variants of tiny"), lines
    looped = subprocess.run([sys.executable, str(script), "--record", str(record), "--model", "tiny", "--column-loop"], capture_output=True, text=True, timeout=300)
    assert looped.returncode == 0, looped.stderr[-2000:]
    assert [line.split()[6:8] for line in looped.stdout.splitlines()[2:6]] == [["[4,", "16,"], ["[8,", "8,"]] * 2 and "4, 1]" in looped.stdout, looped.stdout
    # (by the option's default, 3x3s unrolled)
    by_size = subprocess.run([sys.executable, str(script), "--record", str(record), "--model", "tiny", "--formulation", "by-size"], capture_output=True, text=True, timeout=300)
    assert by_size.returncode == 0 and "4, 1]" not in by_size.stdout and [line.split()[6:10] for line in by_size.stdout.splitlines()[2:6]] == [line.split()[6:10] for line in lines[2:6]], by_size
    # (the first's eight channels four to a load, the second's six two; its ReLU not read through)
    assert [line.split()[:6] for line in lines[2:6]] == [["3x3", "1", "1", "True", "False", "4"]] * 2 + [["3x3", "2", "1", "False", "False", "2"]] * 2, lines
    # (each compile's seconds, then its coalescing pass's, a part of them)
    assert all(float(line.split()[-2]) > float(line.split()[-1]) > 0 for line in lines[2:6]), lines
    assert lines[6].startswith("summed ") and "by compile_cost" in lines[6], lines
    assert lines[7].startswith("TritonGPUCoalesce "), lines
    wrong = subprocess.run([sys.executable, str(script), "--record", str(record), "--model", "other"], capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "no backend row of other" in wrong.stderr and "tiny" in wrong.stderr, wrong.stderr
