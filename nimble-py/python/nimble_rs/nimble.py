"""``Nimble``: a PyTorch module run as one ahead-of-time scheduled, multi-stream CUDA graph."""

import inspect
import json
import os
import tempfile
from typing import Any, Dict, List, Optional

import torch

from ._version import REQUIRED_TORCH, check_torch_version
from .errors import NimbleInputError, NotPreparedError
from .tracing import counts_from_shapes


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

    def __init__(self, module: torch.nn.Module):
        if isinstance(module, torch.jit.ScriptModule):
            self._script: Optional[torch.jit.ScriptModule] = module
        elif isinstance(module, torch.nn.Module):
            self._script = None
        else:
            raise TypeError(f"expected a torch.nn.Module or a torch.jit.ScriptModule, got {type(module).__name__}")
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

        With ``training=True`` (the paper's training mode), the module is traced in training mode
        and two graphs are captured, the forward (on the plan's streams) and its backward; calling
        the model then replays the forward inside an autograd function whose backward replays the
        backward graph, so ``loss.backward()`` accumulates into the parameters' ``.grad`` and any
        ``torch.optim`` optimizer steps them. The module's parameters and buffers keep the values
        they had before ``prepare``; ``optimize`` and ``channels_last`` apply to inference only."""
        inputs = _tensors(example_inputs)
        native = self._load(inputs, training)
        self._prepared_native = None
        report = json.loads(native.prepare(inputs, algorithm, optimize, channels_last, training, fold_half_precision))
        self._prepared_native = native
        return report

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """Replays the graph on ``inputs``; the module's output structure, its tensors the graph's
        own output buffers, overwritten by the next call (as ``torch.cuda.graphs`` does): clone
        what you keep, or use ``forward_owned``."""
        return self._prepared().forward(_tensors(inputs), False)

    def forward_owned(self, *inputs: torch.Tensor) -> Any:
        """As calling the model, with every output tensor a copy of its own."""
        return self._prepared().forward(_tensors(inputs), True)

    def eager(self, *inputs: torch.Tensor) -> Any:
        """The traced module's own forward, op by op (the reference Nimble is checked against)."""
        inputs = _tensors(inputs)
        return self._load(inputs, self._training).eager(inputs)

    def run_optimized(self, *inputs: torch.Tensor) -> List[torch.Tensor]:
        """The forward after the inference rewrites, run once op by op (on the CPU too): what the
        rewrites compute, to check against the module. The output tensors, flat."""
        inputs = _tensors(inputs)
        return self._load(inputs, False).run_optimized(inputs)

    def trace_graph(self, *inputs: torch.Tensor, optimize: bool = True) -> Dict[str, Any]:
        """The task graph of one forward on ``inputs``, recorded without preparing (on the CPU
        too), as a dict in the JSON schema of docs/cli.md, for ``assign`` and ``simulate``."""
        inputs = _tensors(inputs)
        return json.loads(self._load(inputs, False).trace_graph(inputs, optimize))

    def task_graph(self) -> Dict[str, Any]:
        """The prepared forward's task graph (with each task's measured GPU time)."""
        return json.loads(self._prepared().task_graph())

    def plan(self) -> Dict[str, Any]:
        """The prepared plan: ``streams``, ``syncs``, ``stream_of``, ``order``, ``sync_edges``."""
        return json.loads(self._prepared().plan())

    def export_graph(self, path: "os.PathLike[str] | str") -> None:
        """Writes the prepared task graph as JSON (what ``nimble-bench assign --graph`` reads);
        through a temporary file, so a failed write leaves no half-written file."""
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
