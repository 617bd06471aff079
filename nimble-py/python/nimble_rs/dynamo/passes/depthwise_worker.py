"""A worker process of ``depthwise_ahead``: its share of the depthwise kernel's variants compiled
into Triton's cache on disk, for the parent's GPU target and under the parent's cache key,
without a GPU.

Run as ``python .../depthwise_worker.py JOB`` (JOB: a JSON file of the target, the parent's
compiler backend hash and environment variables, and Triton's serialized specialization of each
variant), it prints, as its last line, whether each compiled and its seconds. It imports Triton
and the kernel's file (``depthwise_triton``, loaded by its path) and nothing of the package, so
not torch: a worker with nothing to compile runs in 0.13 s here, where torch's import alone took 1.4 s.
"""

import importlib.util
import json
import os
import sys
import time
from typing import Any, Dict


def _triton():
    """The module ``depthwise_triton``: the package's where this is imported within it, else
    (run as a script) loaded from its file beside this one under a name of its own, so that no
    other file of this folder shadows a module Triton imports."""
    if __package__:
        from . import depthwise_triton

        return depthwise_triton
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "depthwise_triton.py")
    spec = importlib.util.spec_from_file_location("nimble_depthwise_triton", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker(job: Dict[str, Any]) -> Dict[str, Any]:
    """A worker's share: each source compiled for the job's target under the key the parent
    computes for it, the parent's compiler backend hash and environment variables standing in
    for this process's (nothing here touches a GPU): under ``results`` whether each compiled,
    and its seconds; under ``started`` when (``time.time()``) the first began, Triton imported."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    target = GPUTarget(*job["target"])
    backend_hash = job["backend_hash"]
    type(make_backend(target)).hash = lambda self: backend_hash
    kernel = _triton().kernel()
    began, results = time.time(), []
    for source in job["sources"]:
        started = time.perf_counter()
        try:
            signature, constants, attrs, options = _specialization(json.loads(source), tl)
            triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options, _env_vars=job["env_vars"])
            results.append((True, time.perf_counter() - started))
        except Exception:  # noqa: BLE001 - compiled (or reported) in the parent instead
            results.append((False, time.perf_counter() - started))
    return {"started": began, "results": results}


def _specialization(found: Dict[str, Any], tl) -> tuple:
    """Triton's serialized specialization (``serialize_specialization_data``: JSON, its tuples
    made lists) as its compile takes it: the signature, the constants (Triton's dtypes and
    constexprs rebuilt), the attributes and the options."""
    constants = {}
    for path, value in zip(found["constant_keys"], found["constant_vals"]):
        if tl.dtype.is_dtype(value):
            value = tl.dtype(value)
        elif isinstance(value, dict) and "constexpr" in value:
            value = tl.constexpr(value["constexpr"])
        constants[tuple(path)] = value
    attrs = {tuple(path): value for path, value in zip(found["attrs_keys"], found["attrs_vals"])}
    signature = {name: _tuples(kind) for name, kind in found["signature"].items()}
    options = {name: tuple(value) if isinstance(value, list) else value for name, value in found["options"].items()}
    return signature, constants, attrs, options


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


if __name__ == "__main__":
    # (the script's folder, this package's, off the path: its modules' names are not Triton's)
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    with open(sys.argv[1]) as f:
        print(json.dumps(_worker(json.load(f))))
