"""nimble_rs.tracing: a `repeat_interleave` count the tracer computed from shapes is traced as
the number it holds (on a GPU the tensor-of-repeats overload failed, or read the repeats back on
the host), and a count computed from the data is left as the tensor it is."""

import warnings

import torch

from models import Repeats
from nimble_rs.tracing import counts_from_shapes


def repeat_counts(traced):
    """The types of the counts the trace's repeat_interleave calls take."""
    return [str(list(node.inputs())[1].type()) for node in traced.graph.nodes() if node.kind() == "aten::repeat_interleave"]


def test_a_count_read_from_a_shape_is_traced_as_the_number_it_holds():
    x = torch.randn(12, 8)
    for method in (False, True):
        module = Repeats(method=method).eval()
        with torch.no_grad(), counts_from_shapes(), warnings.catch_warnings():
            # The tracer's warning that the count becomes a constant is not the user's to see.
            warnings.simplefilter("error", torch.jit.TracerWarning)
            traced = torch.jit.trace(module, (x,))
        assert repeat_counts(traced) == ["int"], traced.graph
        with torch.no_grad():
            assert torch.equal(traced(x), module(x))
    assert torch.repeat_interleave is torch._C._VariableFunctions.repeat_interleave
    assert torch.Tensor.repeat_interleave is torch._C.TensorBase.repeat_interleave


def test_a_count_computed_from_the_data_stays_a_tensor_and_the_trace_follows_the_data():
    module, x = Repeats(from_data=True).eval(), torch.ones(12, 8)
    with torch.no_grad(), counts_from_shapes():
        traced = torch.jit.trace(module, (x,), check_trace=False)
    assert repeat_counts(traced) == ["Tensor"], traced.graph
    other = -torch.ones(12, 8)  # another count: 1 instead of 4
    with torch.no_grad():
        assert torch.equal(traced(other), module(other)) and not torch.equal(module(other), module(x))


def test_outside_a_trace_the_counts_are_untouched():
    module, x = Repeats().eval(), torch.randn(12, 8)
    with torch.no_grad(), counts_from_shapes():
        assert torch.equal(module(x), Repeats.forward(module, x))
        assert torch.equal(torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 3])), torch.tensor([0, 1, 1, 2, 2, 2]))
