"""The options of ``torch.compile(model, backend="nimble", options={...})``: their defaults,
what each does, and their checks."""

import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional, Union

import torch

from .. import scheduling
from ..errors import NimbleInputError


@dataclass(frozen=True)
class Options:
    """Every option of the backend, typed, with its default; the comment above each field says
    what it does. Made once per compile by ``checked`` from the user's dict, then read as
    attributes (``options.algorithm``)."""

    # Any registered algorithm, with its argument (`nimble_rs.algorithms()`).
    algorithm: str = "nimble"
    # "auto": measure the plan's streams against Inductor's program on one stream and keep the
    # faster (on a GPU; on the CPU the plan runs in its order); "streams": always the plan;
    # "single": Inductor's program for the whole graph, captured.
    choose: str = "auto"
    # Input shapes per subgraph (a CUDA graph each on a GPU); beyond it, a new shape runs without
    # Nimble: uncaptured on a GPU, Dynamo's graph as it is on the CPU (one warning).
    max_shapes: int = 8
    # Runs before each capture (autotuning, library handles and workspaces per stream).
    warmups: int = 3
    # "compiler": streams are kept only if their outputs are no further from eager than the
    # compiler's own program (the whole graph as one region), beyond its own run-to-run spread
    # (compiled.within_accuracy); "any": speed alone decides.
    accuracy: str = "compiler"
    # Training graphs (AOTAutograd's forward and backward) captured as CUDA graphs; off, they
    # run as compiled regions on one stream, announced once.
    capture_training: bool = True
    # "kernels": Inductor compiles the whole graph once and its kernels are planned; "regions":
    # the ATen ops are planned and Inductor compiles each region of the plan.
    granularity: str = "kernels"
    # A directory: each graph's kernels, as the backend planned them, are written there in the
    # project's JSON schema (KIND-N.graph.json, never over an existing file), for
    # `nimble-bench schedulers --simulate --graphs DIR` and nimble_rs.scheduling (granularity
    # "kernels"; every kernel on weights alone in it, joined to its reader's task, as planned
    # without options weight_stream and hoist_weight_kernels).
    graphs: Optional[Union[str, os.PathLike]] = None
    # True: the plan's stream 0 is captured at the device's highest stream priority, so that
    # its kernels are dispatched before the other streams' when they contend for the device
    # (with algorithm "nimble-critical", stream 0 holds the heaviest path of kernels).
    priority: bool = False
    # True: in inference graphs, convolutions reading the same input with the same kernel size,
    # stride, padding and dilation run as one convolution over their concatenated weights
    # (``merge``), before Inductor compiles the graph (granularity "kernels").
    merge_convolutions: bool = False
    # True: with choose="auto" on a GPU (granularity "kernels"), a second plan is timed beside
    # the chosen algorithm's and Inductor's program: Nimble's chains with the heaviest path of
    # kernels on stream 0 (`nimble-critical`), that stream captured at the highest priority.
    # The fastest of the three is kept (the report's `measured_ms` has each, `algorithm` and
    # `priority` the plan kept); where the GPU is full (batch 16 on branchy CNNs) the kernels
    # on the critical path then go first.
    time_critical_path: bool = True
    # True: in inference graphs (granularity "kernels", the plan's programs), the kernels that
    # read parameters and buffers alone (on a GPU, the copy of each convolution's weight into
    # the layout it reads) run once outside the CUDA graph, and again before a call only when
    # such a parameter has moved or its version counter has changed (in-place ops, optimizers,
    # load_state_dict). Writes through ``p.data`` bump no counter and are not seen: off by
    # default (``hoist``).
    hoist_weight_kernels: bool = False
    # True: each kernel that reads parameters and buffers alone writes a buffer of its own
    # (granularity "kernels"). Inductor gives the copy of a weight the buffer of the last weight
    # of its shape, so that copy waits for every reader of the last one: branches reading
    # weights of one shape then run one after another. Exact; the kernels still run on every
    # call (``hoist.separate``). Off by default: measured, it bought about 1% (Inception-v3,
    # batch 1, H100), within the noise.
    separate_weight_buffers: bool = False
    # True: the kernels that read parameters and buffers alone (on a GPU, the copy of each
    # convolution's weight into the layout it reads) run on every call, one after another on a
    # stream of their own, from the start of the graph, each writing a buffer of its own, kept
    # to the call's end; each region of the plan that reads one waits for its event (granularity
    # "kernels", inference and forward graphs). Exact: nothing is kept between calls. Off, each
    # runs just before its reader, on its reader's stream. Measured on an H100 (5 rounds), it
    # took Inception-v3 at batch 1 from 0.71x to 0.63x reduce-overhead's latency (0.72x to
    # 0.67x in a second run; hoisting: 0.59x), and at batch 16 Inception-v3 from 0.89x to 0.86x,
    # Inception-v4 from 0.93x to 0.89x, GoogLeNet from 0.84x to 0.81x. Without buffers of their own (separate_weight_buffers),
    # the copies into a reused buffer would wait for its last readers: they stay in the plan.
    weight_stream: bool = True
    # True: a call of a captured inference graph launches it first and compares the parameters'
    # and buffers with the captured addresses while it runs (``runner.CapturedGraph.replay_checked``;
    # a moved one found that way costs a wasted replay, then a capture again). False: compared
    # before the launch, as training graphs and graphs that write a buffer in place always are:
    # 0.06-0.08 us a tensor on the call's critical path.
    check_after_launch: bool = True
    # True or "folded": in float32 inference graphs on a GPU, a convolution whose output goes
    # through per-channel affine ops (an inference BatchNorm) to a ReLU runs as cuDNN's fused
    # convolution, bias and ReLU, over its weights scaled by the BatchNorm in the graph on every
    # call (``fold``); not where the ReLU feeds a concatenation or cuDNN's fused kernel is
    # measured slower than the convolution alone at that shape. Its outputs differ from eager's
    # by TF32's own error (the scaled weights round differently).
    # "epilogue": the same chains as one cuDNN graph (package nvidia-cudnn-frontend) with the
    # scale, bias and ReLU in the convolution's epilogue over the weights as they are: eager's
    # arithmetic but for the order of float32 sums (``epilogue``); each shape's plans timed once,
    # fused where the fastest beats the convolution and a pointwise pass and is exact.
    fuse_convolutions: Union[bool, str] = False
    # True: in inference graphs on a GPU, a matrix product of few rows by a wide weight (a
    # classifier at a small batch: addmm(bias, x, w.t()) as Inductor calls cuBLAS) runs
    # transposed, (w @ x.t()).t() + bias, where that is measured faster at its shape (at most
    # 0.8 of the time; ``products``). The same float arithmetic summed in another order.
    # False: every product as Inductor calls it.
    transpose_products: bool = True
    # True: in inference graphs on a GPU, a depthwise convolution (one filter per channel) runs
    # as our Triton kernel where that is measured at most 0.9 of cuDNN's time at its shape, in the
    # faster of two tiles, reading its input through the zero padding, ReLU and BatchNorm before
    # it where there are (``depthwise``): the same arithmetic summed tap by tap. Measured on an
    # H200, it took NASNet-A large (float32, batch 16) from 0.94x to 0.77x reduce-overhead's
    # latency. Its kernel's variants compile in worker processes while cuDNN is timed
    # (``depthwise_ahead``), which took NASNet-A large at batch 1 from 1.89x reduce-overhead's
    # compile time (16d688f, compiled on threads) to 1.33x (1b66f8a). The kernel of a 3x3 has
    # every tap unrolled, a larger one its columns a loop (``depthwise.LOOP_ABOVE_TAPS``: a
    # seventh of the compile time; within 2 us at batch 1 and up to a third faster at batch 16 on
    # NASNet-A large's; fb141f8). "unrolled": every kernel's taps unrolled (the default before);
    # "columns": every kernel's columns a loop. False: every convolution as Inductor calls cuDNN.
    depthwise_kernels: Union[bool, str] = True
    # True: in inference graphs, a concatenation of at least 2.5 MB that Inductor would compute
    # in one pointwise kernel loading from every input (an Inception block's join of its
    # branches' BatchNorm-ReLUs) is written in place instead, each input by its own kernel into
    # its slice, as Inductor does on a CPU; not one whose every use is pointwise (fused into its
    # readers, as Inductor chose). ``concat``.
    # False: every concatenation as Inductor lowers it.
    concat_in_place: bool = True
    # True: kernels writing disjoint slices of one allocation (each part of a join written in
    # place, through its own view) follow none of each other, and may run on several streams;
    # the allocation is then made just after the latest kernel they all follow, on its stream
    # (else on stream 0 before the fork; ``slices``, ``emit``). False: every access of an
    # allocation is ordered as of the whole of it.
    disjoint_slices: bool = True
    # Inductor's settings for this backend's compiles, as {name: value} (names of
    # `torch._inductor.config`, e.g. {"layout_optimization": False}); the rest are the user's.
    # Measured on an H100 (6ef8069): layout_optimization off drops Inductor's channels-last
    # weight copies, but its NCHW convolutions took GoogLeNet at batch 16 from 0.83x to 1.03x
    # reduce-overhead's latency and Inception-v3 from 0.85x to 1.20x.
    inductor_config: Optional[Dict[str, Any]] = None


# The defaults by name (public as ``nimble_rs.dynamo.DEFAULTS``).
DEFAULTS: Dict[str, Any] = {f.name: f.default for f in fields(Options)}

def checked(options: Optional[dict]) -> Options:
    """The options given over the defaults, each checked: a wrong type, an unknown key or a
    ``options`` that is not a dict is a ``NimbleInputError`` naming it and what it takes,
    raised before anything is compiled."""
    if options is not None and not isinstance(options, dict):
        raise NimbleInputError(f"options={options!r}: expected a dict of option names to values (known options: {', '.join(DEFAULTS)})")
    chosen = dict(DEFAULTS)
    for key, value in (options or {}).items():
        if key not in DEFAULTS:
            raise NimbleInputError(f"unknown option `{key}` for backend=\"nimble\"; known options: {', '.join(DEFAULTS)}")
        chosen[key] = value
    if chosen["choose"] not in ("auto", "streams", "single"):
        raise NimbleInputError(f"option choose={chosen['choose']!r}: expected \"auto\", \"streams\" or \"single\"")
    if not _integer(chosen["max_shapes"]) or chosen["max_shapes"] < 1:
        raise NimbleInputError(f"option max_shapes={chosen['max_shapes']!r}: expected a positive integer")
    if not isinstance(chosen["capture_training"], bool):
        raise NimbleInputError(f"option capture_training={chosen['capture_training']!r}: expected True or False")
    if chosen["granularity"] not in ("kernels", "regions"):
        raise NimbleInputError(f"option granularity={chosen['granularity']!r}: expected \"kernels\" or \"regions\"")
    if chosen["graphs"] is not None and (not isinstance(chosen["graphs"], (str, os.PathLike)) or os.path.isfile(chosen["graphs"])):
        raise NimbleInputError(f"option graphs={chosen['graphs']!r}: expected a directory to write the planned kernel graphs to")
    if not (isinstance(chosen["fuse_convolutions"], bool) or chosen["fuse_convolutions"] in ("folded", "epilogue")):
        raise NimbleInputError(f"option fuse_convolutions={chosen['fuse_convolutions']!r}: expected False, True (\"folded\"), \"folded\" or \"epilogue\"")
    for flag in ("priority", "merge_convolutions", "time_critical_path", "hoist_weight_kernels", "separate_weight_buffers", "weight_stream", "check_after_launch", "transpose_products", "concat_in_place", "disjoint_slices"):
        if not isinstance(chosen[flag], bool):
            raise NimbleInputError(f"option {flag}={chosen[flag]!r}: expected True or False")
    if not (isinstance(chosen["depthwise_kernels"], bool) or chosen["depthwise_kernels"] in ("unrolled", "columns")):
        raise NimbleInputError(f"option depthwise_kernels={chosen['depthwise_kernels']!r}: expected True, False, \"unrolled\" or \"columns\"")
    _check_inductor_config(chosen["inductor_config"])
    if chosen["accuracy"] not in ("compiler", "any"):
        raise NimbleInputError(f"option accuracy={chosen['accuracy']!r}: expected \"compiler\" or \"any\"")
    if not _integer(chosen["warmups"]) or chosen["warmups"] < 1:
        raise NimbleInputError(f"option warmups={chosen['warmups']!r}: expected a positive integer")
    name = chosen["algorithm"]
    if not isinstance(name, str) or name.split(":")[0] not in {n for n, _, _ in scheduling.algorithms()}:
        known = ", ".join(usage for _, usage, _ in scheduling.algorithms())
        raise NimbleInputError(f"option algorithm={name!r}: expected a registered algorithm ({known})")
    # Its argument too (round-robin:K), by the registry itself, before anything is compiled.
    scheduling.assign({"nodes": [{"id": 0, "op": "probe"}], "edges": []}, name)
    return Options(**chosen)


def _integer(value) -> bool:
    """An int that is not a bool (``True`` is an int to Python, not a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_inductor_config(settings) -> None:
    import torch._inductor.config as inductor_config

    if settings is None:
        return
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise NimbleInputError(f"option inductor_config={settings!r}: expected a dict of torch._inductor.config names to values")
    known = inductor_config.get_config_copy()
    unknown = sorted(k for k in settings if k not in known)
    if unknown:
        raise NimbleInputError(f"option inductor_config: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not settings of torch._inductor.config (e.g. layout_optimization, freezing)")
    # Inductor's patch takes any value: a flag given "yes" would be truthy, silently.
    for name, value in settings.items():
        expected = _expected_value(inductor_config, name, value)
        if expected is not None:
            raise NimbleInputError(f"option inductor_config: {name}={value!r}: expected {expected}, the type of torch._inductor.config.{name}")


def _expected_value(config, name: str, value) -> Optional[str]:
    """What ``value`` should be for Inductor's setting ``name`` where its declared type is a
    plain one (a flag, a number, a string, one of some literals, or one of those or None);
    None where it fits or the type is another kind (left to Inductor)."""
    import types
    import typing

    entry = getattr(config, "_config", {}).get(name)
    declared = getattr(entry, "value_type", None)
    if typing.get_origin(declared) in (typing.Union, types.UnionType) and type(None) in typing.get_args(declared):
        rest = [t for t in typing.get_args(declared) if t is not type(None)]
        if value is None:
            return None
        declared = rest[0] if len(rest) == 1 else None
    if typing.get_origin(declared) is typing.Literal:
        choices = typing.get_args(declared)
        return None if value in choices else "one of " + ", ".join(repr(c) for c in choices)
    plain = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    if declared not in plain:
        return None
    if declared is bool:
        fits = isinstance(value, bool)
    elif declared is str:
        fits = isinstance(value, str)
    else:
        fits = isinstance(value, (int, float) if declared is float else int) and not isinstance(value, bool)
    return None if fits else plain[declared]


def inductor_settings(options: Options):
    """Inductor's config with option ``inductor_config`` applied, for one compile."""
    return torch._inductor.config.patch(options.inductor_config or {})
