"""``torch.compile(model, backend="nimble")``: Inductor's fused kernels on Nimble's streams.

Granularity ``"kernels"`` (the default): Inductor compiles each graph Dynamo hands over once,
as ``torch.compile`` would (``compile_fx``, our step in place of its inner compile: AOTAutograd,
a forward and a backward when training, Inductor's passes, fusion, code generation); the kernels
of its program become the task graph, the Rust registry plans it with the chosen algorithm, and
the program's statements are emitted again with every kernel on its plan stream
(``kernels``: the inner compile step; ``program``: reading and planning).

Granularity ``"regions"``: AOTAutograd's ATen graph is planned op by op, cut into regions
(maximal one-stream runs with no sync inside) and Inductor compiles each region on its own; the
whole graph is compiled a second time as one region to compare against (here, beside the entry).
What both share (the reports, a graph's signature and report, the ``NimbleCompiled``): ``graphs``.

On a GPU the chosen program is captured on its streams into one CUDA graph per input shape
(``runner``); on the CPU it runs in plan order. Never slower than the compiler: where the plan
has more than one stream, both programs are captured and timed; the faster is kept, and the
report says which and why.
"""

import time
from typing import Any, List, Optional, Sequence

import torch
import torch.fx

from .._version import warn_if_newer
from ..errors import NimbleInputError
from . import regions as regions_module
from . import graphs
from .graphs import REPORTS, assemble, graph_report, static_shape_key
from .kernels import compile_kernels
from .options import Options
from .options import checked as _options
from .options import inductor_settings as _inductor_settings
from .program.taskgraph import Tasks, mutated_inputs, tasks_of
from .runtime import capturable
from .runtime.compiled import NimbleCompiled, admit_shape
from .runtime.runner import Program


def reports() -> List[dict]:
    """One report per graph the backend compiled, oldest first: algorithm, streams, syncs,
    regions, the choice made and why, compile seconds, captured shapes and their memory."""
    return REPORTS


def _compile_regions(gm: torch.fx.GraphModule, tasks: Tasks, algorithm: str) -> Program:
    import torch._inductor

    partition = regions_module.partition(gm, tasks, algorithm)
    compiled = []
    for region in partition.regions:
        examples = [v.meta.get("val") for v in region.inputs]
        # Outside the enclosing graph's tracing context: each region's compile would report its
        # own output strides there as the whole forward's, and AOTAutograd would restride the
        # backward's inputs by the last region's. (Inductor keeps every output's eager strides.)
        with torch._guards.tracing(None):
            compiled.append(torch._inductor.compile(region.module, examples))
    return Program(gm, partition, compiled)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, kind: str) -> NimbleCompiled:
    """Granularity "regions": plans, partitions and compiles one ATen graph (``kind``: forward,
    backward or inference)."""
    started = time.perf_counter()
    # AOTAutograd's static inputs are the forward's (parameters and buffers); a backward's
    # inputs are the forward's saved values and the gradients, found when it is captured.
    static_indices = capturable.static_indices() if kind != "backward" else set()
    tasks = tasks_of(gm, sorted(static_indices))
    signature = graphs.signature(gm, kind)
    on_cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
    key = static_shape_key(example_inputs)
    if not on_cuda and key is not None and not admit_shape(signature, key, options.max_shapes):
        return gm.forward
    report, uncapturable = graph_report(gm, example_inputs, options, kind, on_cuda)
    report["ops"] = len(tasks.nodes)

    streams_program = single_program = None
    if options.choose != "single" and tasks.nodes:
        streams_program = _compile_regions(gm, tasks, options.algorithm)
        partition = streams_program.partition
        report.update(streams=partition.streams, syncs=partition.syncs, regions=len(partition.regions))
        if partition.streams == 1:
            # Already the whole graph as one region.
            single_program, streams_program = streams_program, None
            report["reason"] = f"{options.algorithm} plans one stream: the whole graph is one region"
    need_single = single_program is None and (options.choose == "single" or (options.choose == "auto" and on_cuda and uncapturable is None))
    if need_single or (streams_program is None and single_program is None):
        single_program = _compile_regions(gm, tasks, "single")
        report.setdefault("streams", 1)
    return assemble(streams_program, single_program, gm, example_inputs, static_indices, mutated_inputs(gm), kind, signature, report, uncapturable, options, started)


def nimble_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], options: Optional[dict] = None, **extra):
    """The Dynamo backend: ``torch.compile(model, backend="nimble", options={...})``, or
    ``backend=nimble_rs.backend``. Options: ``options.DEFAULTS``."""
    if extra:
        raise NimbleInputError(f"unexpected arguments for backend=\"nimble\": {', '.join(extra)}; pass options={{...}}")
    chosen = _options(options)
    warn_if_newer(torch.__version__)
    if chosen.granularity == "kernels":
        import functools

        from torch._inductor.compile_fx import compile_fx

        # AOTAutograd's cache would hand back a graph compiled before without our step.
        with torch._functorch.config.patch(enable_autograd_cache=False), _inductor_settings(chosen):
            return compile_fx(gm, example_inputs, inner_compile=functools.partial(_inner, options=chosen))
    from torch._dynamo.backends.common import aot_autograd

    from torch._functorch.aot_autograd import make_boxed_func

    # AOTAutograd's calling convention: one list of the graph's inputs. Each under option
    # inductor_config (a backward is compiled at its first call).
    def compiler(kind: str):
        def compile_one(graph, inputs):
            with _inductor_settings(chosen):
                return make_boxed_func(compile_graph(graph, inputs, chosen, kind))

        return compile_one

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"), inference_compiler=compiler("inference"))(gm, example_inputs)


def _inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options, **inner_kwargs):
    # (Again here: compile_fx compiles a backward at its first call, outside nimble_backend.)
    with _inductor_settings(options):
        return compile_kernels(gm, example_inputs, options, inner_kwargs)
