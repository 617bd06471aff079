"""``nimble_rs.Nimble`` where its libtorch engine cannot run (a torch other than the one it is built
for, or the engine not installed): the model runs through ``torch.compile(backend="nimble")``,
Inductor's fused kernels on Nimble's streams, one CUDA graph captured per prepared input shape (on
the CPU, the plan's program without a graph). ``nimble.Nimble`` chooses the path and announces it
once; this module is the backend's side of it.

What differs from the engine: no TorchScript trace (Dynamo's graphs instead), the backend's
rewrites instead of the engine's (``optimize``, ``channels_last`` and ``fold_half_precision`` do
not apply, and the report says so), and no task graph or plan of the whole forward (one report
per graph Dynamo handed over instead)."""

import contextlib
import time
from typing import Any, Dict, List, Optional

import torch

from .errors import NimbleInputError, NotPreparedError


# The graphs' reports of each module compiled on this path, by (its id, algorithm, training,
# input signature): Dynamo reuses a compile for a second Nimble of the same module.
_COMPILED: Dict[tuple, List[Dict[str, Any]]] = {}


def _signature(inputs: tuple) -> tuple:
    return tuple((tuple(x.shape), x.dtype, x.device.type) for x in inputs)


def _describe(signature: tuple) -> str:
    return ", ".join(f"{'x'.join(map(str, shape)) or 'scalar'} {str(dtype).replace('torch.', '')} on {device}" for shape, dtype, device in signature)


def _owned(value: Any) -> Any:
    """``value`` with every tensor in it a copy of its own."""
    return torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.clone, value)


def _backward(outputs: Any) -> None:
    """A backward through every output that needs a gradient, with gradients of ones."""
    found = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if found:
        torch.autograd.backward(found, [torch.ones_like(t) for t in found])


class BackendPath:
    """A module compiled with ``backend="nimble"`` for the shapes it was prepared on."""

    def __init__(self, module: torch.nn.Module, why: str):
        self.module = module
        self.why = why
        self.compiled: Dict[tuple, Any] = {}
        self.prepared: Dict[tuple, Dict[str, Any]] = {}
        self.training: Optional[bool] = None
        self.algorithm: Optional[str] = None

    @contextlib.contextmanager
    def _mode(self, training: bool):
        """The module in the mode it was prepared in, with gradients only for training, for one
        call (Dynamo's graphs are specialised on the mode)."""
        was_training = self.module.training
        self.module.train(training)
        try:
            with torch.set_grad_enabled(training):
                yield
        finally:
            self.module.train(was_training)

    def prepare(self, inputs: tuple, algorithm: str, training: bool, ignored: List[str]) -> Dict[str, Any]:
        from . import dynamo
        from .dynamo.options import checked

        checked({"algorithm": algorithm})  # a bad name is refused before anything is compiled
        if self.training is not None and (training, algorithm) != (self.training, self.algorithm):
            # Another mode or algorithm: what was prepared before does not apply.
            self.prepared.clear()
        self.training, self.algorithm = training, algorithm
        key = (algorithm, training)
        if key not in self.compiled:
            # dynamic=False: one graph, and on a GPU one capture, per input shape, as the engine.
            self.compiled[key] = torch.compile(self.module, backend="nimble", options={"algorithm": algorithm}, dynamic=False)
        before = len(dynamo.reports())
        started = time.perf_counter()
        # In training a backward follows, so that its graph is compiled (and captured) here too;
        # neither counts as a training step: the buffers they update (BatchNorm's running
        # statistics) and the gradients get their values back, as the engine's trace leaves them.
        buffers = [(b, b.detach().clone()) for b in self.module.buffers()] if training else []
        gradients = [(p, None if p.grad is None else p.grad.clone()) for p in self.module.parameters()] if training else []
        try:
            with self._mode(training):
                outputs = self.compiled[key](*inputs)
                if training:
                    _backward(outputs)
        finally:
            with torch.no_grad():
                for buffer, value in buffers:
                    buffer.copy_(value)
                for parameter, grad in gradients:
                    parameter.grad = grad
        seconds = time.perf_counter() - started
        graphs = dynamo.reports()[before:]
        signature = _signature(inputs)
        remembered = (id(self.module), algorithm, training, signature)
        reused = not graphs and remembered in _COMPILED
        if reused:
            # Dynamo kept an earlier compile of this module for these inputs and options (another
            # Nimble's, say): its graphs are the ones that run.
            graphs = _COMPILED[remembered]
        elif graphs:
            _COMPILED[remembered] = graphs
        report: Dict[str, Any] = {
            "path": "backend",
            "why": self.why,
            "algorithm": algorithm,
            "training": training,
            "graphs": len(graphs),
            "streams": max((g.get("streams", 1) for g in graphs), default=1),
            "syncs": sum(g.get("syncs", 0) for g in graphs),
            "kernels": sum(g.get("kernels", 0) for g in graphs),
            "captured": any(x.is_cuda for x in inputs),
            "seconds": {"prepare": seconds},
            "graph_reports": graphs,
        }
        if reused:
            report["reused"] = "Dynamo's earlier compile of this module for these inputs"
        elif not graphs:
            report["reused"] = "a compile of this module made outside Nimble (its reports: nimble_rs.dynamo.reports())"
        if ignored:
            report["ignored"] = ignored
        self.prepared[signature] = report
        return report

    def __call__(self, inputs: tuple, owned: bool) -> Any:
        if not self.prepared:
            raise NotPreparedError("the model is not prepared: call prepare(*example_inputs) first")
        signature = _signature(inputs)
        if signature not in self.prepared:
            shapes = "; ".join(_describe(s) for s in self.prepared)
            raise NimbleInputError(f"inputs {_describe(signature)} were not prepared (prepared: {shapes}); call prepare with them first")
        with self._mode(self.training):
            outputs = self.compiled[(self.algorithm, self.training)](*inputs)
        return _owned(outputs) if owned else outputs

    def eager(self, inputs: tuple) -> Any:
        """The module's own forward, in the mode prepared (evaluation before any prepare)."""
        with self._mode(bool(self.training)):
            return self.module(*inputs)
