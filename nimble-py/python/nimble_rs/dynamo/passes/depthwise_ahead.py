"""The depthwise kernel's variants (``depthwise.variants``) compiled ahead of their measurements,
in worker processes, then loaded here.

A Triton compile holds Python's lock while it turns the kernel's Python into Triton's first IR
(``ast_to_ttir``: 23 of the 75 s that NASNet-A large's 46 variants took one by one on two cores
here), so threads overlap only the rest: on an H200's 16 cores, eight threads took 34 s for those
46 variants, the sum of their compiles 230 s, as on two cores here.

So this process first asks Triton what it would compile for each variant, without compiling:
Triton's cache hook hands over the specialization (the source's signature, constants and
attributes, and the options), and this process holds the rest of Triton's cache key: its
compiler backend's hash (the version of the ptxas it read first, which the environment may no
longer name) and the environment variables Triton keys on (``_sources``). Worker processes
(``depthwise_worker``, which imports Triton and the kernel's file alone) compile those sources
for the GPU target under exactly that key into Triton's cache on disk, without touching the GPU.
They start first (``start``), so that what this process does meanwhile (``depthwise`` times
cuDNN's convolutions and the writes) overlaps them.
(Workers keying their compiles as a new process would, an H200 loaded none of them here and
compiled all 46 again, 30.6 s at `1f55903`; a ptxas changed in the environment after Triton's
first read does that here.) This process then warms each variant up, which loads it from that
cache as its launches would, on threads (``_load_or_compile``), compiling whatever a worker did
not; the compiles it made are counted.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple, Union

import torch

from ..common.phases import in_phase
from .depthwise_triton import kernel as _kernel

# Threads loading (or compiling, where no worker did) the variants in this process.
COMPILE_THREADS = 8
# Worker processes at most, and one fewer than the cores at most (that core left to this
# process, which times cuDNN's convolutions meanwhile: ``timing.graph_us``); below
# PROCESSES_FROM variants, or with fewer than PROCESSES_FROM_CORES cores, the threads alone (on
# two cores here, NASNet-A large's 46 variants took 41 s in two workers, each importing torch
# then, against 33 s on threads).
PROCESSES = 16
PROCESSES_FROM = 4
PROCESSES_FROM_CORES = 4
# The seconds the workers may take in all before those left are compiled here instead.
WORKER_SECONDS = 600


def compile_ahead(specs: List[tuple]) -> Dict[str, Any]:
    """``start`` and, at once, its ``Ahead.finish``."""
    return start(specs).finish()


@in_phase("depthwise ahead")
def start(specs: List[tuple]) -> "Ahead":
    """Each variant of ``specs`` (``depthwise.variants``) compiled by Triton without a launch, so
    that the measurements one by one find them compiled: where there are at least
    ``PROCESSES_FROM`` of them and ``PROCESSES_FROM_CORES`` cores, in worker processes, started
    here and left running (what this process does meanwhile, such as timing cuDNN, overlaps
    them), then loaded here by ``Ahead.finish``; otherwise on threads by ``Ahead.finish``."""
    cores = _cores()
    workers = min(PROCESSES, cores - 1, len(specs)) if len(specs) >= PROCESSES_FROM and cores >= PROCESSES_FROM_CORES else 1
    return Ahead(specs, workers)


class Ahead:
    """The variants ``start`` set compiling."""

    def __init__(self, specs: List[tuple], workers: int):
        self.specs, self.started = specs, time.perf_counter()
        self.running: Union[_Workers, str, None] = _Workers.start(specs, workers) if workers > 1 else None

    def finish(self) -> Dict[str, Any]:
        """The variants compiled (the workers waited for, what they made loaded here on threads,
        whatever they did not compiled here): counts of those compiled and (where any) failed (a
        variant that fails here is compiled again at its measurement, whose failure is announced
        there); under ``variant_seconds`` the seconds each variant's compile took, summed, and the
        longest (their sum over the seconds they took together: how far they overlapped); under
        ``processes``, where they ran, the workers started, how many they compiled, the seconds
        from ``start`` to the last worker's end, the longest a worker took to start (its Python
        and Triton imported), the seconds loading here took and how many this process compiled
        itself all the same (where this Triton can say), or why none could run."""
        processes = self.running.wait() if isinstance(self.running, _Workers) else self.running
        ended = time.perf_counter()
        with _compiles_counted() as compiled_here:
            done, took = _load_or_compile(self.specs)
        counts: Dict[str, Any] = {"compiled_ahead": sum(done)}
        if isinstance(processes, str):
            counts["processes"] = {"failed": processes}
        elif processes is not None:
            counts["processes"] = {"workers": processes["workers"], "compiled": processes["compiled"], "seconds": round(ended - self.started, 2), "startup_seconds": processes["startup_seconds"], "loaded_seconds": round(time.perf_counter() - ended, 2)}
            if compiled_here is not None:
                counts["processes"]["compiled_here"] = len(compiled_here)
            took = processes["seconds"] or took
        counts["variant_seconds"] = {"sum": round(sum(took), 2), "longest": round(max(took), 2)}
        if not all(done):
            counts["compile_ahead_failed"] = len(done) - sum(done)
        return counts


def compile_cost(spec: tuple) -> int:
    """A variant's compile cost, in the kernel's unrolled operations: the loads of the input
    rows its output rows read (each column tap) and the multiply-adds of its taps into them.
    Compiled one by one on two cores here, NASNet-A large's 40 bfloat16 variants took 0.27 to
    3.01 s, 63.4 s in all; shared out to 15 workers by this cost, the longest share takes 4.92 s,
    by their taps alone (each tile alike) 6.46 s, by the seconds measured 4.33
    (paper-figs/results/probes/depthwise-compile-costs-d102c8d-nasnet-a-large-bfloat16.txt)."""
    k = kernel_constants(spec)
    # (a tile whose kernel columns are a loop unrolls one column's)
    unrolled = 1 if k["COLUMN_LOOP"] else k["KW"]
    return ((k["ROWS"] - 1) * k["SH"] + (k["KH"] - 1) * k["DH"] + 1) * unrolled + k["ROWS"] * k["KH"] * unrolled


def shared_out(group: List[Tuple[tuple, Any]], workers: int, cost: Callable[[tuple], float] = compile_cost) -> List[List[Any]]:
    """The second of each (variant, source) of ``group`` shared out to at most ``workers``
    shares, the costliest variant by ``cost`` first, each to the least loaded share; the shares
    that got any."""
    shares: List[List[Any]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for spec, source in sorted(group, key=lambda found: -cost(found[0])):
        least = loads.index(min(loads))
        shares[least].append(source)
        loads[least] += cost(spec)
    return [share for share in shares if share]


def kernel_constants(spec: tuple) -> Dict[str, Any]:
    """A variant's (``depthwise.variants``) compile-time arguments of the kernel, by name
    (``depthwise_triton``): its geometry, prologue, tile and whether its kernel columns are a
    loop (a tile's fifth entry, where it has one)."""
    _, _, has_bias, (has_scale, has_shift), (kh, kw), (sh, sw), (top, left), (dh, dw), relu, (rows, block_w, block_c, _, *loop), vec = spec
    return dict(SH=sh, SW=sw, PH=top, PW=left, DH=dh, DW=dw, KH=kh, KW=kw, HAS_BIAS=has_bias, HAS_SCALE=has_scale, HAS_SHIFT=has_shift, RELU_IN=relu, ROWS=rows, BLOCK_W=block_w, BLOCK_C=block_c, VEC=vec, COLUMN_LOOP=bool(loop and loop[0]))


def _warmup(kernel, spec):
    """``kernel`` warmed up (compiled, or loaded, without a launch) for ``spec``, on the current
    device."""
    dtype, warps = spec[1], spec[9][3]
    # (Pointers as their dtypes, Triton's stand-ins: aligned, as every buffer here is.)
    return kernel.warmup(dtype, dtype, dtype, dtype, dtype, dtype, 1, 1, 1, 1, 1, 1, 1, **kernel_constants(spec), grid=(1,), num_warps=warps)


def _load_or_compile(specs: List[tuple]) -> Tuple[List[bool], List[float]]:
    """Each variant warmed up here on up to ``COMPILE_THREADS`` threads (a load from Triton's
    cache where a worker compiled it): whether it was, and the seconds each took."""
    from concurrent.futures import ThreadPoolExecutor

    took: List[float] = []

    def one(spec) -> bool:
        started = time.perf_counter()
        try:
            with torch.cuda.device(spec[0]):
                _warmup(_kernel(), spec)
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


@contextlib.contextmanager
def _compiles_counted():
    """A list that gains an entry for each compile of the kernel in this process (not a load from
    Triton's cache) while in the block, through Triton's compilation listener; None where this
    Triton has none."""
    try:
        from triton import knobs

        knobs.compilation.listener
    except (ImportError, AttributeError):
        yield None
        return
    kernel, compiled, previous = _kernel(), [], knobs.compilation.listener

    def listener(**event):
        if not event.get("cache_hit", True) and getattr(event.get("src"), "fn", None) is kernel:
            compiled.append(1)
        if previous is not None:
            previous(**event)

    knobs.compilation.listener = listener
    try:
        yield compiled
    finally:
        knobs.compilation.listener = previous


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _sources(specs: List[tuple]) -> Dict[tuple, List[Tuple[tuple, str]]]:
    """What this process would compile for each variant it has not compiled yet, by the rest of
    Triton's cache key as this process holds it ((target's backend, architecture, warp size),
    its compiler backend's hash, the environment variables Triton keys on, as JSON): each
    variant and Triton's serialized specialization of it, captured by Triton's cache hook,
    which skips the compile."""
    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime import driver

    kernel, captured, previous = _kernel(), [], knobs.runtime.jit_cache_hook

    def hook(**event):
        if event["fn"].jit_function is not kernel:
            return previous(**event) if previous is not None else None
        captured.append(event["compile"]["specialization_data"])
        return True

    groups: Dict[tuple, List[Tuple[tuple, str]]] = {}
    knobs.runtime.jit_cache_hook = hook
    try:
        for spec in specs:
            captured.clear()
            with torch.cuda.device(spec[0]):
                _warmup(kernel, spec)
                target = driver.active.get_current_target()
            if captured:
                parts = ((target.backend, target.arch, target.warp_size), make_backend(target).hash(), json.dumps(get_cache_invalidating_env_vars(), sort_keys=True))
                groups.setdefault(parts, []).append((spec, captured[0]))
    finally:
        knobs.runtime.jit_cache_hook = previous
    return groups


class _Workers:
    """Worker processes (``depthwise_worker``) compiling the variants this process has not
    (``_sources``) into Triton's cache as this process would, up to ``workers`` for each key,
    the costliest to compile (``compile_cost``) shared out first."""

    def __init__(self, running: List[Tuple[subprocess.Popen, float]], folder: tempfile.TemporaryDirectory):
        self.running, self.folder, self.began = running, folder, time.perf_counter()

    @classmethod
    def start(cls, specs: List[tuple], workers: int) -> Union["_Workers", str]:
        """The workers started, or, where Triton could not say what it would compile or no
        worker could start, why (everything is then compiled here)."""
        from triton import knobs

        try:
            groups = _sources(specs)
        except Exception as error:  # noqa: BLE001 - another Triton: everything compiled here instead
            return f"Triton's specialization not found ({type(error).__name__}: {error})"
        jobs = []
        for (target, backend_hash, env_vars), group in groups.items():
            jobs += [{"target": list(target), "backend_hash": backend_hash, "env_vars": json.loads(env_vars), "sources": share} for share in shared_out(group, workers)]
        # (the cache this process reads, whatever set it)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "TRITON_CACHE_DIR": knobs.cache.dir}
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "depthwise_worker.py")
        folder = tempfile.TemporaryDirectory(prefix="nimble-depthwise-")
        running: List[Tuple[subprocess.Popen, float]] = []
        try:
            for n, job in enumerate(jobs):
                path = os.path.join(folder.name, f"job-{n}.json")
                with open(path, "w") as f:
                    json.dump(job, f)
                running.append((subprocess.Popen([sys.executable, script, path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True), time.time()))
        except OSError as error:
            for worker, _ in running:
                worker.kill()
                worker.communicate()
            folder.cleanup()
            return f"no worker started ({type(error).__name__}: {error})"
        return cls(running, folder)

    def wait(self) -> Dict[str, Any]:
        """The workers waited for, each at most until ``WORKER_SECONDS`` from their start (one
        still running then is stopped: its share is compiled here): how many started, how many
        variants they compiled, each one's seconds, and the longest a worker took from its
        start to its first compile."""
        compiled, seconds, startup = 0, [], 0.0
        try:
            for worker, spawned in self.running:
                try:
                    out, _ = worker.communicate(timeout=max(1.0, WORKER_SECONDS - (time.perf_counter() - self.began)))
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.communicate()
                    continue
                try:
                    found = json.loads(out.strip().splitlines()[-1]) if worker.returncode == 0 and out.strip() else {}
                except ValueError:  # (what it printed is not its results: its share is compiled here)
                    found = {}
                if not isinstance(found, dict):
                    continue
                for ok, took in found.get("results", []):
                    compiled += bool(ok)
                    seconds.append(took)
                if "started" in found:
                    startup = max(startup, found["started"] - spawned)
        finally:
            # (none left running, whatever stopped the wait)
            for worker, _ in self.running:
                if worker.poll() is None:
                    worker.kill()
                    worker.communicate()
            self.folder.cleanup()
        return {"workers": len(self.running), "compiled": compiled, "seconds": seconds, "startup_seconds": round(startup, 2)}
