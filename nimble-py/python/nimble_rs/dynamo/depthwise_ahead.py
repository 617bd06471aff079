"""The depthwise kernel's variants (``depthwise.variants``) compiled ahead of their measurements,
in worker processes, then loaded here.

A Triton compile holds Python's lock while it turns the kernel's Python into Triton's first IR
(``ast_to_ttir``: 23 of the 75 s that NASNet-A large's 46 variants took one by one on two cores
here), so threads overlap only the rest: on an H200's 16 cores, eight threads took 34 s for those
46 variants, the sum of their compiles 230 s. Each worker process (``python -m
nimble_rs.dynamo.depthwise_ahead JOB``) compiles its share for the parent's GPU target into Triton's
cache on disk, without touching the GPU (a stand-in for Triton's driver names the target); the
parent then loads each variant from that cache, as its launches would, on threads
(``_load_or_compile``), and compiles there whatever a worker did not.
"""

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

# Threads loading (or compiling, where no worker did) the variants in this process.
COMPILE_THREADS = 8
# Worker processes at most, one per core at most; below PROCESSES_FROM variants the threads
# alone (a worker's start, Python and torch imported, is about 1.3 s).
PROCESSES = 16
PROCESSES_FROM = 4
# The seconds the workers may take in all before those left are compiled here instead.
WORKER_SECONDS = 600


def compile_ahead(specs: List[tuple]) -> Dict[str, Any]:
    """Each variant of ``specs`` (``depthwise.variants``) compiled by Triton without a launch,
    so that the measurements one by one find them compiled: in worker processes where there are
    at least ``PROCESSES_FROM`` and more than one core (``_in_processes``), then loaded here.
    Counts of those compiled and (where any) failed: a variant that fails here is compiled again
    at its measurement, whose failure is announced there; under ``variant_seconds`` the seconds
    each variant's compile took, summed, and the longest (their sum over the seconds they took
    together: how far they overlapped), and under ``processes``, where they ran, the workers'
    count, how many they compiled, their seconds and the seconds loading took here."""
    workers = min(PROCESSES, _cores(), len(specs)) if len(specs) >= PROCESSES_FROM else 1
    started = time.perf_counter()
    processes = _in_processes(specs, workers) if workers > 1 else None
    ended = time.perf_counter()
    done, took = _load_or_compile(specs)
    counts: Dict[str, Any] = {"compiled_ahead": sum(done)}
    if processes is not None:
        compiled, seconds = processes
        counts["processes"] = {"workers": workers, "compiled": compiled, "seconds": round(ended - started, 2), "loaded_seconds": round(time.perf_counter() - ended, 2)}
        took = seconds or took
    counts["variant_seconds"] = {"sum": round(sum(took), 2), "longest": round(max(took), 2)}
    if not all(done):
        counts["compile_ahead_failed"] = len(done) - sum(done)
    return counts


def _load_or_compile(specs: List[tuple]) -> Tuple[List[bool], List[float]]:
    """Each variant warmed up here on up to ``COMPILE_THREADS`` threads (a load from Triton's
    cache where a worker compiled it): whether it was, and the seconds each took."""
    from concurrent.futures import ThreadPoolExecutor

    from .depthwise_kernel import _kernel

    took: List[float] = []

    def one(spec) -> bool:
        device, dtype, has_bias, (has_scale, has_shift), (kh, kw), (sh, sw), (top, left), (dh, dw), relu, (rows, block_w, block_c, warps), vec = spec
        started = time.perf_counter()
        try:
            with torch.cuda.device(device):
                # (Pointers as their dtypes, Triton's stand-ins: aligned, as every buffer here is.)
                _kernel().warmup(dtype, dtype, dtype, dtype, dtype, dtype, 1, 1, 1, 1, 1, 1, 1, sh, sw, top, left, dh, dw, kh, kw, has_bias, has_scale, has_shift, relu, rows, block_w, block_c, vec, grid=(1,), num_warps=warps)
            return True
        except Exception:  # noqa: BLE001 - compiled (or reported) at its measurement instead
            return False
        finally:
            took.append(time.perf_counter() - started)

    # The first alone: it makes the kernel's cache for the device, which threads making it at
    # once would each make anew, all but one of their compiles then lost (seen here).
    done = [one(specs[0])]
    with ThreadPoolExecutor(max_workers=max(1, min(COMPILE_THREADS, len(specs) - 1))) as pool:
        done += list(pool.map(one, specs[1:]))
    return done, took


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _in_processes(specs: List[tuple], workers: int) -> Optional[Tuple[int, List[float]]]:
    """``specs`` shared among ``workers`` worker processes (per GPU target, where a graph's
    devices differ), the largest kernels first, each compiling for its target into Triton's
    cache: how many they compiled and the seconds each took; None where no worker could start
    (everything is then compiled here)."""
    from triton.runtime import driver

    groups: Dict[tuple, List[tuple]] = {}
    for spec in specs:
        with torch.cuda.device(spec[0]):
            target = driver.active.get_current_target()
        groups.setdefault((target.backend, target.arch, target.warp_size), []).append(spec)
    jobs = []
    for target, group in groups.items():
        shares: List[List[list]] = [[] for _ in range(workers)]
        loads = [0] * workers
        # (the heaviest first, each to the least loaded: a kernel's cost grows with its taps)
        for spec in sorted(group, key=lambda s: -s[4][0] * s[4][1]):
            least = loads.index(min(loads))
            shares[least].append(_encoded(spec))
            loads[least] += spec[4][0] * spec[4][1]
        jobs += [json.dumps({"target": list(target), "specs": share}) for share in shares if share]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    started = time.perf_counter()
    running = []
    try:
        for job in jobs:
            running.append(subprocess.Popen([sys.executable, "-m", __name__, job], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True))
    except OSError:
        for worker in running:
            worker.kill()
            worker.communicate()
        return None
    compiled, seconds = 0, []
    for worker in running:
        try:
            out, _ = worker.communicate(timeout=max(1.0, WORKER_SECONDS - (time.perf_counter() - started)))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
            continue
        if worker.returncode == 0 and out.strip():
            for ok, took in json.loads(out.strip().splitlines()[-1]):
                compiled += ok
                seconds.append(took)
    return compiled, seconds


def _encoded(spec: tuple) -> list:
    _, dtype, *rest = spec
    return [str(dtype).removeprefix("torch."), *rest]


def _worker(job: Dict[str, Any]) -> List[Tuple[bool, float]]:
    """A worker's share: each variant compiled for the job's target, Triton's driver stood in for
    by one that names it (nothing here touches a GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from .depthwise_kernel import _kernel

    driver.set_active(_Named(GPUTarget(*job["target"])))
    results = []
    for dtype, has_bias, (has_scale, has_shift), (kh, kw), (sh, sw), (top, left), (dh, dw), relu, (rows, block_w, block_c, warps), vec in job["specs"]:
        dtype = getattr(torch, dtype)
        started = time.perf_counter()
        try:
            _kernel().warmup(dtype, dtype, dtype, dtype, dtype, dtype, 1, 1, 1, 1, 1, 1, 1, sh, sw, top, left, dh, dw, kh, kw, has_bias, has_scale, has_shift, relu, rows, block_w, block_c, vec, grid=(1,), num_warps=warps)
            results.append((True, time.perf_counter() - started))
        except Exception:  # noqa: BLE001 - compiled (or reported) in the parent instead
            results.append((False, time.perf_counter() - started))
    return results


class _Named:
    """Triton's driver as far as a compile without a launch asks it: the target given, device 0."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))))
