"""``Nimble``: a PyTorch module run as one ahead-of-time scheduled, multi-stream CUDA graph."""

import inspect
import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional

import torch

from ._version import REQUIRED_TORCH, check_torch_version, engine_mismatch
from .backend_path import BackendPath
from .errors import NimbleError, NimbleInputError, NotPreparedError
from .tracing import counts_from_shapes

PATHS = ("auto", "engine", "backend")
_announced_path = False


def engine_unavailable() -> Optional[str]:
    """Why the libtorch engine cannot run in this Python, or None: a torch other than the one it
    is built for, or nimble-rs-engine not installed."""
    reason = engine_mismatch(torch.__version__)
    if reason is not None:
        return reason
    try:
        import nimble_rs_engine  # noqa: F401
    except ImportError as e:
        return f"nimble-rs-engine is not installed ({e})"
    return None


def _announce_backend_path(why: str) -> None:
    """Said once per process: which path Nimble takes where the engine cannot run."""
    global _announced_path
    if not _announced_path:
        _announced_path = True
        warnings.warn(
            f"nimble_rs.Nimble: {why}; it runs models through torch.compile(backend=\"nimble\") instead "
            "(Inductor's kernels on Nimble's streams, one CUDA graph per prepared input shape; "
            f"install torch=={REQUIRED_TORCH} with nimble-rs-engine for the engine's path)",
            RuntimeWarning,
            stacklevel=3,
        )


def engine():
    """The libtorch engine (`nimble_rs_engine`), imported on first use: only here, not at
    ``import nimble_rs``, must torch be the version it was built for (2.11.0); any other is an
    ImportError naming both, and a missing engine an ImportError saying how to install it."""
    check_torch_version(torch.__version__)
    try:
        import nimble_rs_engine
    except ImportError as e:
        raise ImportError(
            "nimble_rs.Nimble needs the libtorch engine, nimble-rs-engine, which is not installed "
            f"({e}); build it with `maturin develop --release -m nimble-py/engine/Cargo.toml` in a Python "
            f"with torch {REQUIRED_TORCH} (torch.compile(backend=\"nimble\") works without it)"
        ) from e
    return nimble_rs_engine


def _tensors(inputs: tuple) -> tuple:
    if not inputs:
        raise TypeError("no inputs given: pass the forward's tensors, e.g. prepare(x)")
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input {i}: expected a torch.Tensor, got {type(x).__name__} (Nimble's forward takes tensors only; bind other arguments in the module)")
    return inputs


def _check_count(module: torch.nn.Module, inputs: tuple) -> None:
    """A plain module's forward must take as many tensors as were given."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    if len(inputs) < len(required) or (not variadic and len(inputs) > len(positional)):
        names = ", ".join(p.name for p in positional)
        raise NimbleInputError(f"{len(inputs)} input tensors given; the module's forward takes ({names})")


class Nimble:
    """Wraps a ``torch.nn.Module`` (traced with ``torch.jit.trace`` at ``prepare``) or a
    ``torch.jit.ScriptModule`` (used as is).

    Nimble runs on the module's own parameters and buffers (the same tensors, not copies): an
    optimizer's updates reach it, and a graph prepared for training updates BatchNorm's running
    statistics as the module would. A graph prepared for inference with ``optimize=True`` has
    the weights folded in (BatchNorm into convolutions): prepare again after changing them.
    """

    def __init__(self, module: torch.nn.Module, path: str = "auto"):
        """``path``: ``"auto"`` takes the engine where it can run (torch 2.11.0 with
        nimble-rs-engine installed) and the backend otherwise, announced once; ``"engine"``
        refuses another torch (ImportError naming both versions); ``"backend"`` always runs the
        model through ``torch.compile(backend="nimble")`` (``backend_path``)."""
        if isinstance(module, torch.jit.ScriptModule):
            self._script: Optional[torch.jit.ScriptModule] = module
        elif isinstance(module, torch.nn.Module):
            self._script = None
        else:
            raise TypeError(f"expected a torch.nn.Module or a torch.jit.ScriptModule, got {type(module).__name__}")
        if path not in PATHS:
            raise NimbleInputError(f"path={path!r}: expected \"auto\", \"engine\" or \"backend\"")
        why = engine_unavailable() if path == "auto" else "path=\"backend\" was asked for" if path == "backend" else None
        self._backend: Optional[BackendPath] = None
        if why is not None:
            if self._script is not None:
                raise NimbleInputError(f"a ScriptModule runs only on the engine's path, and {why}; pass the nn.Module itself")
            if path == "auto":
                _announce_backend_path(why)
            self._backend = BackendPath(module, why)
        else:
            # The engine now, so that a torch other than its own fails here, naming both versions.
            engine()
        self._module = module
        self._native: Optional[Any] = None
        self._prepared_native: Optional[Any] = None
        self._loaded_as: Optional[tuple] = None
        self._training = False

    def _load(self, inputs: tuple, training: bool) -> Any:
        """The Rust model on the inputs' device, traced (a plain module) in evaluation or
        training mode as asked; loaded again only when the device or the mode changes."""
        device = inputs[0].device
        # A plain module is traced again for inputs of other shapes or dtypes (a trace may
        # bake them in); a ScriptModule takes whatever its forward accepts.
        signature = None if self._script is not None else [(tuple(x.shape), x.dtype) for x in inputs]
        if self._native is None or self._loaded_as != (device, training, signature):
            script = self._script if self._script is not None else self._trace(inputs, training)
            with tempfile.TemporaryDirectory(prefix="nimble_rs-") as directory:
                path = os.path.join(directory, "module.pt")
                torch.jit.save(script, path)
                native = engine().Native.load(path, str(device))
            # The loaded module's tensors are copies from the file: it reads the module's own
            # instead (a trace shares them with the module it traced).
            names, tensors = _own_tensors(script)
            native.bind(names, tuple(tensors))
            self._native = native
            self._loaded_as = (device, training, signature)
            self._training = training
        arguments = self._native.arguments()
        required = [name for name, _, has_default in arguments if not has_default]
        if not len(required) <= len(inputs) <= len(arguments):
            names = ", ".join(f"{name}: {kind}" for name, kind, _ in arguments)
            raise NimbleInputError(f"{len(inputs)} input tensors given; the module's forward takes ({names})")
        return self._native

    def _trace(self, inputs: tuple, training: bool) -> torch.jit.ScriptModule:
        module = self._module
        _check_count(module, inputs)
        was_training = module.training
        module.train(training)
        # A forward in training mode updates BatchNorm's running statistics: the trace's must
        # not count.
        buffers = [(b, b.detach().clone()) for _, b in module.named_buffers()] if training else []
        try:
            with torch.set_grad_enabled(training), counts_from_shapes():
                # strict=False: transformers-style outputs (dicts, lists) are traced as they are.
                return torch.jit.trace(module, inputs, strict=False, check_trace=False)
        except Exception as e:
            # The tracer's last line says why (the lines before it print the offending values).
            reason = [line for line in str(e).splitlines() if line.strip()][-1:] or [type(e).__name__]
            raise NimbleInputError(
                f"torch.jit.trace could not trace {type(module).__name__}: {reason[0].lstrip(':')}; "
                "script it (torch.jit.script) and pass the ScriptModule to Nimble instead"
            ) from e
        finally:
            module.train(was_training)
            with torch.no_grad():
                for buffer, value in buffers:
                    buffer.copy_(value)

    def _engine_only(self, method: str) -> None:
        """Refuses ``method`` on the backend's path, which has no task graph of the whole
        forward (the backend's option ``graphs`` writes each graph's kernels instead)."""
        if self._backend is not None:
            raise NimbleError(
                f"Nimble.{method} needs the libtorch engine, and this Nimble runs through the backend ({self._backend.why}); "
                "torch.compile(model, backend=\"nimble\", options={\"graphs\": DIR}) writes each graph's planned kernels"
            )

    def _prepared(self) -> Any:
        # Kept apart from `_native`, which `eager` or `trace_graph` on inputs of other shapes
        # replace: those calls leave the prepared graph as it is.
        if self._prepared_native is None:
            raise NotPreparedError("the model is not prepared: call prepare(*example_inputs) first")
        return self._prepared_native

    def prepare(
        self,
        *example_inputs: torch.Tensor,
        algorithm: str = "nimble",
        optimize: bool = True,
        training: bool = False,
        channels_last: Optional[bool] = None,
        fold_half_precision: bool = False,
    ) -> Dict[str, Any]:
        """Traces the forward on ``example_inputs`` (CUDA tensors; their shapes and dtypes are
        fixed from now on), assigns its tasks to streams with ``algorithm`` (see
        ``nimble_rs.algorithms()``) and captures one CUDA graph. ``optimize`` applies the
        inference rewrites (BatchNorm folding, cuDNN's and Nimble's fused kernels);
        ``channels_last`` forces the layout (``None``: chosen by measuring). In a float16 or
        bfloat16 module BatchNorm stays an op of its own, as eager and the compiler run it;
        ``fold_half_precision=True`` folds it into the convolutions (in float32, rounded once):
        faster (ResNet-50 in bfloat16 0.39 against 0.90 ms on an H200), further from eager
        (0.127 against torch.compile's 0.084). Returns the report:
        ``streams``, ``syncs``, ``tasks``, ``kernel_nodes``, ``seconds`` per stage, …

        On the backend's path (``path``; ``backend_path``) the module is compiled with
        ``torch.compile(backend="nimble", options={"algorithm": algorithm})`` and run once on
        ``example_inputs`` (on a GPU, that captures the shape's CUDA graph); the report has
        ``path``, ``why``, ``graphs``, ``streams``, ``syncs``, ``kernels``, ``captured``,
        ``seconds``, each graph's own report, and ``ignored``: the arguments that path does not
        apply (``optimize``, ``channels_last``, ``fold_half_precision`` given other than their
        defaults).

        With ``training=True`` (the paper's training mode), the module is traced in training mode
        and two graphs are captured, the forward (on the plan's streams) and its backward; calling
        the model then replays the forward inside an autograd function whose backward replays the
        backward graph, so ``loss.backward()`` accumulates into the parameters' ``.grad`` and any
        ``torch.optim`` optimizer steps them. The module's parameters and buffers keep the values
        they had before ``prepare``; ``optimize`` and ``channels_last`` apply to inference only."""
        inputs = _tensors(example_inputs)
        if self._backend is not None:
            given = {"optimize": (optimize, True), "channels_last": (channels_last, None), "fold_half_precision": (fold_half_precision, False)}
            ignored = [name for name, (value, default) in given.items() if value != default]
            return self._backend.prepare(inputs, algorithm, training, ignored)
        native = self._load(inputs, training)
        self._prepared_native = None
        report = json.loads(native.prepare(inputs, algorithm, optimize, channels_last, training, fold_half_precision))
        self._prepared_native = native
        return report

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """Replays the graph on ``inputs``; the module's output structure, its tensors the graph's
        own output buffers, overwritten by the next call (as ``torch.cuda.graphs`` does): clone
        what you keep, or use ``forward_owned``."""
        if self._backend is not None:
            return self._backend(_tensors(inputs), owned=False)
        return self._prepared().forward(_tensors(inputs), False)

    def forward_owned(self, *inputs: torch.Tensor) -> Any:
        """As calling the model, with every output tensor a copy of its own."""
        if self._backend is not None:
            return self._backend(_tensors(inputs), owned=True)
        return self._prepared().forward(_tensors(inputs), True)

    def eager(self, *inputs: torch.Tensor) -> Any:
        """The traced module's own forward, op by op (the reference Nimble is checked against)."""
        inputs = _tensors(inputs)
        if self._backend is not None:
            return self._backend.eager(inputs)
        return self._load(inputs, self._training).eager(inputs)

    def run_optimized(self, *inputs: torch.Tensor) -> List[torch.Tensor]:
        """The forward after the inference rewrites, run once op by op (on the CPU too): what the
        rewrites compute, to check against the module. The output tensors, flat."""
        inputs = _tensors(inputs)
        self._engine_only("run_optimized")
        return self._load(inputs, False).run_optimized(inputs)

    def trace_graph(self, *inputs: torch.Tensor, optimize: bool = True) -> Dict[str, Any]:
        """The task graph of one forward on ``inputs``, recorded without preparing (on the CPU
        too), as a dict in the JSON schema of docs/cli.md, for ``assign`` and ``simulate``."""
        inputs = _tensors(inputs)
        self._engine_only("trace_graph")
        return json.loads(self._load(inputs, False).trace_graph(inputs, optimize))

    def task_graph(self) -> Dict[str, Any]:
        """The prepared forward's task graph (with each task's measured GPU time)."""
        self._engine_only("task_graph")
        return json.loads(self._prepared().task_graph())

    def plan(self) -> Dict[str, Any]:
        """The prepared plan: ``streams``, ``syncs``, ``stream_of``, ``order``, ``sync_edges``."""
        self._engine_only("plan")
        return json.loads(self._prepared().plan())

    def export_graph(self, path: "os.PathLike[str] | str") -> None:
        """Writes the prepared task graph as JSON (what ``nimble-bench assign --graph`` reads);
        through a temporary file, so a failed write leaves no half-written file."""
        self._engine_only("export_graph")
        text = self._prepared().task_graph()
        path = os.fspath(path)
        temporary = f"{path}.partial"
        with open(temporary, "w") as f:
            f.write(text)
        os.replace(temporary, path)


def _own_tensors(script: torch.jit.ScriptModule) -> tuple:
    """Every parameter and buffer of ``script`` with its dotted name, a tensor shared by several
    names (tied weights) under each."""
    named = []
    for members in (script.named_parameters, script.named_buffers):
        try:
            named.extend(members(remove_duplicate=False))
        except TypeError:  # an older signature, without remove_duplicate
            named.extend(members())
    return [name for name, _ in named], [tensor for _, tensor in named]
