"""The backend's accuracy check at the choice: how many inputs it runs, how eager's references
are computed and held, how far from them a program's outputs are, and how much further than the
compiler's own program a plan on streams may be."""

import contextlib
from typing import List

import torch

# The inputs the choice's accuracy check runs (the capture's and shuffles of it), and how much
# further from eager streams may be than one region: float32's reassociation noise, and
# beyond it the compiler's own program's run-to-run spread (its atomic additions sum in
# whatever order the GPU runs them: ``within_accuracy``).
ACCURACY_INPUTS = 5
ACCURACY_SLACK = 0.02
# Eager's outputs on one of the check's inputs larger than this are kept in host memory, each
# moved back for its comparison: on the device a backward's every gradient, five times over, sat
# beside the graphs timed (the encoder's backward choice peaked at 4,087 MiB, 1,719 before it).
HOST_REFERENCES_BYTES = 64 << 20


@contextlib.contextmanager
def heuristic_convolutions():
    """cuDNN's benchmark mode off while eager's references are computed: the ATen graph's
    convolutions (NCHW, unlike Inductor's) would each be benchmarked once more, seconds of the
    choice on a convolutional network whose eager model never ran (GoogLeNet: 3.3 s of a 6.1 s
    choice on an H200). The references need not be fast, and the programs compared against them
    are compared against the same ones."""
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = benchmark


def check_inputs(output_bytes: int, free_bytes: int) -> int:
    """How many of the accuracy check's inputs to run: ``ACCURACY_INPUTS``, or as many sets of
    ``output_bytes`` (eager's outputs on one input) as a quarter of ``free_bytes`` holds, at
    least one."""
    return max(1, min(ACCURACY_INPUTS, (free_bytes // 4) // max(output_bytes, 1)))


def within_accuracy(error: float, single_error: float, spread: float) -> bool:
    """Whether outputs ``error`` from eager are no further from it than the compiler's own
    program's (``single_error``) beyond noise: 2% for float32's reassociation, plus ``spread``,
    how far that program's outputs are from its own on the same inputs run again (0 where its
    kernels are deterministic; atomic additions, as in an embedding's gradient, sum in whatever
    order the GPU runs them, and by the triangle inequality its own error moves by up to that
    much from one run to the next)."""
    return error <= single_error * (1 + ACCURACY_SLACK) + spread


def median(values: List[float]) -> float:
    return sorted(values)[len(values) // 2]


def float_outputs(outputs, copy: bool = True) -> List[torch.Tensor]:
    """The floating-point outputs as float32: copies, or with ``copy=False`` the outputs
    themselves where they are float32 already (a graph's outputs, read before its next replay
    writes them again: no set of them more on the device than the check needs)."""
    leaves = [x.detach() for x in torch.utils._pytree.tree_leaves(outputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    return [x.to(torch.float32, copy=copy) for x in leaves]


def distance(got: List[torch.Tensor], expected: List[torch.Tensor]) -> float:
    """The outputs' root-mean-square difference over their root-mean-square value (0 with no
    float output). Over every element, so that two programs a rounding apart compare by their
    drift, not by the one element the largest difference happens to land on."""
    if not expected:
        return 0.0
    squared, scale = 0.0, 0.0
    for a, b in zip(got, expected):
        b = b.to(a.device)  # one at a time where ``expected`` is in host memory
        squared += float(((a - b) ** 2).sum())
        scale += float((b**2).sum())
    return (squared / max(scale, 1e-60)) ** 0.5
