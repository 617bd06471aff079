"""torch.compile(backend="nimble") on the CPU: the task graph of an ATen graph, its regions under
every registered algorithm, outputs against eager through Inductor, keyword arguments, graph
breaks, the shape bound and the fallback warning. (Capture on streams is in test_backend_gpu.py.)"""

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import nimble_rs
from nimble_rs.dynamo.runtime import capturable
from nimble_rs.dynamo import pipeline
from nimble_rs.dynamo.regions import partition
from nimble_rs.dynamo.runtime.runner import Program
from nimble_rs.dynamo.program.taskgraph import mutated_inputs, tasks_of
from models import Attention, Branches, Branchy, Counter, Inception, ScalesItsInput, relative_error, train_beside_eager

torch.manual_seed(0)


def aten_graph(model, *inputs):
    with torch.no_grad():
        return make_fx(model)(*inputs)


def every_algorithm():
    return [usage.replace(":K", ":3") for _, usage, _ in nimble_rs.algorithms()]


@pytest.mark.parametrize("algorithm", every_algorithm())
def test_regions_cover_each_op_once_and_keep_its_dependencies(algorithm):
    model, x = Inception().eval(), torch.randn(1, 4, 8, 8)
    gm = aten_graph(model, x)
    tasks = tasks_of(gm)
    cut = partition(gm, tasks, algorithm)
    seen = sorted(t for r in cut.regions for t in r.tasks)
    assert seen == list(range(len(tasks.nodes))), "every op in exactly one region"
    region_of = {t: r.index for r in cut.regions for t in r.tasks}
    for u, v in tasks.graph["edges"]:
        assert region_of[u] <= region_of[v], f"{algorithm}: edge {u}->{v} goes back from region {region_of[u]} to {region_of[v]}"
    if algorithm == "single":
        assert len(cut.regions) == 1
    # The regions' own programs, run in plan order without a compiler, give the graph's output.
    program = Program(gm, cut, [r.module for r in cut.regions])
    assert torch.equal(program.run([x]), gm(x))


def test_branches_get_streams_and_regions():
    gm = aten_graph(Inception().eval(), torch.randn(1, 4, 8, 8))
    cut = partition(gm, tasks_of(gm), "nimble")
    assert cut.streams >= 3, cut.plan
    assert len(cut.regions) > cut.streams
    # Each branch's ops stay together in a region: no region holds two convolutions of
    # different branches, so Inductor fuses within a branch.
    assert any(len(r.tasks) > 1 for r in cut.regions)


def test_in_place_writes_are_ordered_after_every_read():
    def mutate(buf, x):
        before = buf * 2  # 0: reads buf
        buf.add_(x)  # 1: writes buf
        after = buf + 1  # 2: reads buf again
        view = buf.view(-1)  # 3: a view of buf
        view.mul_(3)  # 4: writes buf through the view
        total = buf.sum()  # 5: reads buf after that write
        return before + after + total  # 6, 7

    gm = make_fx(mutate)(torch.zeros(4), torch.ones(4))
    tasks = tasks_of(gm)
    ops = [n["op"] for n in tasks.graph["nodes"]]
    assert ops[:6] == ["aten::mul", "aten::add_", "aten::add", "aten::view", "aten::mul_", "aten::sum"], ops
    edges = {tuple(e) for e in tasks.graph["edges"]}
    # Write after read, read after write, and both through the view.
    for edge in [(0, 1), (1, 2), (2, 4), (3, 4), (4, 5), (1, 4)]:
        assert edge in edges, (edge, sorted(edges))
    # The plan keeps them: the regions of the writes come after the reads' regions.
    cut = partition(gm, tasks, "nimble")
    region_of = {t: r.index for r in cut.regions for t in r.tasks}
    assert region_of[0] <= region_of[1] <= region_of[2] <= region_of[4] <= region_of[5]
    program = Program(gm, cut, [r.module for r in cut.regions])
    assert torch.equal(program.run([torch.zeros(4), torch.ones(4)]), mutate(torch.zeros(4), torch.ones(4)))


def compiled(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="nimble", options=options or None)


def test_outputs_match_eager_through_inductor_regions():
    model, x = Inception().eval(), torch.randn(2, 4, 8, 8)
    before = len(nimble_rs.dynamo.reports())
    with torch.no_grad():
        expected = model(x)
        fast = compiled(model)
        got = fast(x)
        y = torch.randn(2, 4, 8, 8) + 1
        again = fast(y)
        expected_again = model(y)
    assert relative_error(got, expected) < 1e-5
    assert again.shape == expected.shape and relative_error(again, expected_again) < 1e-5
    report = nimble_rs.dynamo.reports()[before]
    assert report["graph"] == "inference" and report["streams"] >= 3 and report["regions"] > 3, report
    assert report["choice"] == "streams", report


def test_backend_is_found_by_name_and_as_an_object():
    assert torch._dynamo.lookup_backend("nimble") is not None
    # nimble_rs.backend is the backend Dynamo calls with a graph, and with options alone builds a
    # configured one (test_backend_options.py).
    assert nimble_rs.backend is nimble_rs.dynamo.backend
    assert nimble_rs.backend(algorithm="greedy").options == {"algorithm": "greedy"}


def test_keyword_arguments_and_attention_masks():
    model = Attention().eval()
    inputs = {"hidden_states": torch.randn(2, 5, 16), "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])}
    with torch.no_grad():
        expected = model(**inputs)["last_hidden_state"]
        got = compiled(model)(**inputs)["last_hidden_state"]
    assert relative_error(got, expected) < 1e-5


def test_a_data_dependent_branch_runs_through_graph_breaks():
    model = Branchy().eval()
    fast = compiled(model)
    with torch.no_grad():
        for sign in (1.0, -1.0):
            x = torch.randn(4, 8)
            # Make the branch go both ways: y.sum() follows the bias once x is scaled away.
            x = x * 0.0 + sign * 10.0 * torch.sign(model.a.weight.sum(0))
            assert torch.allclose(fast(x), model(x), atol=1e-6)


def test_buffers_mutated_in_place_match_eager():
    eager, fast_model = Counter(), Counter()
    fast_model.load_state_dict(eager.state_dict())
    fast = compiled(fast_model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4)
            assert torch.allclose(fast(x), eager(x), atol=1e-6)
    assert torch.allclose(fast_model.seen, eager.seen)


def test_inputs_written_in_place_are_found_through_views():
    def counts(seen, weight, x):
        seen.add_(x.sum(0))
        return x @ weight * seen

    def scales(weight, x):
        x[:, :2].mul_(2.0)
        return x @ weight

    four = lambda *shape: torch.randn(*shape)
    with torch.no_grad():
        assert mutated_inputs(make_fx(counts)(four(4), four(4, 4), four(3, 4))) == [0]
        assert mutated_inputs(make_fx(scales)(four(4, 4), four(3, 4))) == [1]
        assert mutated_inputs(aten_graph(Branches().eval(), four(1, 3, 8, 8))) == []


def test_a_user_input_written_in_place_is_written_as_eager_writes_it():
    model = ScalesItsInput()
    fast = compiled(model)
    x = torch.randn(3, 4)
    expected_input = x.clone()
    with torch.no_grad():
        expected = model(expected_input)
        assert torch.allclose(fast(x), expected, atol=1e-6)
    assert torch.equal(x, expected_input)


def test_the_shape_bound_warns_once_and_keeps_running():
    model = Branches().eval()
    fast = compiled(model, max_shapes=1)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch._dynamo.config.automatic_dynamic_shapes, saved = False, torch._dynamo.config.automatic_dynamic_shapes
        try:
            for size in (6, 7, 8):
                x = torch.randn(1, 3, size, size)
                assert relative_error(fast(x), model(x)) < 1e-5
        finally:
            torch._dynamo.config.automatic_dynamic_shapes = saved
    messages = [str(w.message) for w in caught if "max_shapes" in str(w.message)]
    assert len(messages) == 1, messages


class PadsOddWidths(nn.Module):
    """Its ATen ops change with the input's width (Dynamo specializes the branch per shape), as
    an attention block's do on a GPU (Inductor pads a matrix product's rows where it times
    padding faster)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        if x.shape[-1] % 2:
            y = nn.functional.pad(y, (0, 1))
        return y.relu()


def test_the_shape_bound_counts_the_shapes_of_one_piece_of_code_whatever_its_ops():
    model = PadsOddWidths().eval()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch._dynamo.config.automatic_dynamic_shapes, saved = False, torch._dynamo.config.automatic_dynamic_shapes
        try:
            # Three shapes of one frame, two op sequences: the third is beyond the bound. Then
            # once more after torch._dynamo.reset() (in `compiled`), which starts the count again.
            for attempt in range(2):
                fast = compiled(model, max_shapes=2)
                for size in (6, 7, 9):
                    x = torch.randn(1, 3, size, size)
                    assert relative_error(fast(x), model(x)) < 1e-5
                messages = [str(w.message) for w in caught if "max_shapes" in str(w.message)]
                assert len(messages) == attempt + 1, messages
        finally:
            torch._dynamo.config.automatic_dynamic_shapes = saved


def test_uncapturable_graphs_are_announced_with_the_reason():
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(4, 4, device="cuda")
        to_host = make_fx(lambda t: (t * 2).cpu() + 1, tracing_mode="fake")(x)
    # t.sum().item(): built by hand, as fake tensors cannot trace a data-dependent scalar.
    graph = torch.fx.Graph()
    t = graph.placeholder("t")
    t.meta["val"] = x
    total = graph.call_function(torch.ops.aten.sum.default, (t,))
    graph.output(graph.call_function(torch.ops.aten._local_scalar_dense.default, (total,)))
    host_read = torch.fx.GraphModule({}, graph)
    with pytest.warns(RuntimeWarning, match="mixes CUDA with cpu tensors"):
        assert "cpu" in capturable.announce_uncapturable(to_host, [x])
    with pytest.warns(RuntimeWarning, match="_local_scalar_dense synchronizes with the host"):
        capturable.announce_uncapturable(host_read, [x])
    assert capturable.announce_uncapturable(aten_graph(Branches().eval(), torch.randn(1, 3, 4, 4)), [torch.randn(1, 3, 4, 4)]) is None


def test_ops_on_weights_alone_join_their_reader():
    # aten.t of each linear layer's weight reads parameters only: as tasks of their own they
    # would be independent sources, and maximum logical concurrency a stream each.
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    gm = aten_graph(model, torch.randn(2, 8))
    tasks = tasks_of(gm)
    ops = [n["op"] for n in tasks.graph["nodes"]]
    assert "aten::t" not in ops, ops
    folded = [n["attrs"]["folded"] for n in tasks.graph["nodes"] if "folded" in n.get("attrs", {})]
    assert folded == [["aten::t"]] * 3, folded
    assert partition(gm, tasks, "nimble").streams == 1


@pytest.mark.parametrize("make, shape", [(lambda: Inception(channels=4), (2, 4, 8, 8)), (lambda: Attention(d=16), (2, 5, 16))])
def test_training_through_the_backend_matches_eager(make, shape):
    # AOTAutograd's forward and backward graphs are each planned and run as regions: gradients
    # reach .grad, any optimizer steps them, BatchNorm's statistics move as eager's do.
    # Seeded: the inputs, whatever ran before (Inception's convolution bias before BatchNorm has
    # a gradient of zero computed as rounding noise, which some draws put past the 1e-6 floor).
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = make().train()
    fast_model = copy.deepcopy(eager)
    fast = torch.compile(fast_model, backend="nimble")
    before = len(nimble_rs.dynamo.reports())
    train_beside_eager(eager, fast, fast_model, lambda: torch.randn(shape))
    kinds = [r["graph"] for r in nimble_rs.dynamo.reports()[before:]]
    assert kinds == ["forward", "backward"], kinds


ANOTHER_TORCH = r"""
import sys, warnings, torch
from torch.torch_version import TorchVersion
torch.__version__ = TorchVersion("2.12.0")   # another torch, as the package sees it
sys.modules["nimble_rs_engine"] = None        # and the libtorch engine unloadable
warnings.simplefilter("always")
import nimble_rs
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
x = torch.randn(3, 4)
with torch.no_grad():
    assert torch.allclose(torch.compile(model, backend="nimble")(x), model(x), atol=1e-6)
print("backend ok", nimble_rs.algorithms()[0][0])
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for _ in range(2):
        fast = nimble_rs.Nimble(model)
        report = fast.prepare(x)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x), atol=1e-6)
notices = [str(w.message) for w in seen if "nimble_rs.Nimble" in str(w.message)]
print("notices", len(notices), notices[0] if notices else "")
print("path", report["path"], report["graphs"], report.get("reused") is not None)
try:
    nimble_rs.Nimble(model, path="engine")
except ImportError as e:
    print("engine:", e)
"""


def test_with_another_torch_the_backend_works_and_nimble_takes_its_path_announced_once():
    import subprocess
    import sys

    # The scheduling extension links no libtorch (the engine does, for torch 2.11.0 only).
    so = next(p for p in (Path(nimble_rs.__file__).parent).iterdir() if p.name.startswith("_sched") and p.suffix == ".so")
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "libtorch" not in needed and "libc10" not in needed, needed
    # With another torch and no engine: import, the backend and the registry work; Nimble runs
    # the model through the backend, saying so once; path="engine" refuses, naming both versions.
    done = subprocess.run([sys.executable, "-c", ANOTHER_TORCH], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "backend ok nimble" in done.stdout, done.stdout
    assert "notices 1 nimble_rs.Nimble: nimble_rs.Nimble's engine was built for torch 2.11.0, but this Python has torch" in done.stdout, done.stdout
    assert "path backend 1 True" in done.stdout, done.stdout
    assert "engine: nimble_rs.Nimble's engine was built for torch 2.11.0, but this Python has torch" in done.stdout, done.stdout


def test_a_graphs_outputs_count_as_held_while_autograd_or_the_user_holds_them():
    # What training capture rests on (runner.CapturedGraph.outputs_released): a storage's use
    # count sees autograd's saved tensors and any alias, and falls back once they are gone.
    from nimble_rs.dynamo.runtime.runner import CapturedGraph

    graph = object.__new__(CapturedGraph)
    graph.outputs = (torch.randn(4, 4), [torch.randn(3)])
    graph.track_outputs(forward=False)
    assert graph.outputs_released()
    weight = torch.randn(4, 4, requires_grad=True)
    loss = (graph.outputs[0] * weight).sum()  # autograd saves the output for weight's gradient
    assert not graph.outputs_released()
    loss.backward()
    del loss
    assert graph.outputs_released()
    alias = graph.outputs[1][0].detach()
    assert not graph.outputs_released()
    del alias
    assert graph.outputs_released()


def test_gradients_a_graph_lends_are_taken_over_by_autograd_and_count_as_held():
    # A captured backward lends its gradients (new tensors over its memory): autograd takes such
    # a gradient over as .grad instead of copying it, and the graph sees it held until the
    # .grad is gone (zero_grad), so that its next replay never writes a live .grad. Gradients
    # the graph keeps for itself are copied.
    from nimble_rs.dynamo.runtime.runner import CapturedGraph

    graph = object.__new__(CapturedGraph)
    graph.outputs = [torch.randn(4, 4), None]
    graph.track_outputs(forward=False)
    weight = torch.zeros(4, 4, requires_grad=True)

    def through(gradient):
        class Backward(torch.autograd.Function):
            @staticmethod
            def forward(ctx, w):
                return w.clone()

            @staticmethod
            def backward(ctx, grad):
                return gradient()

        Backward.apply(weight).sum().backward()

    through(lambda: graph.lent()[0])
    assert weight.grad.data_ptr() == graph.outputs[0].data_ptr(), "autograd copied a lent gradient"
    assert not graph.outputs_released()
    weight.grad = None
    assert graph.outputs_released()
    through(lambda: graph.outputs[0])
    assert weight.grad.data_ptr() != graph.outputs[0].data_ptr() and torch.equal(weight.grad, graph.outputs[0])
    assert graph.outputs_released()



def test_static_inputs_match_tensors_at_the_captured_addresses():
    from nimble_rs.dynamo.runtime.runner import StaticInputs

    weights = [torch.randn(4, 3), torch.randn(3), torch.tensor(2.0), torch.randn(0), torch.randn(5)]
    user = torch.randn(2, 4)
    # Parameters at 0-2, the user's input at 3, more parameters at 4 and 5.
    args = weights[:3] + [user] + weights[3:]
    static = StaticInputs(args, [0, 1, 2, 4, 5])
    fresh = torch.randn(2, 4)
    assert static.match(tuple(args[:3] + [fresh] + args[4:])) and static.match(list(args))

    def replaced(position, value):
        changed = list(args)
        changed[position] = value
        return changed

    # Another tensor, even an equal one, is somewhere else.
    assert not static.match(replaced(0, weights[0].clone()))
    assert not static.match(replaced(2, torch.tensor(2.0)))
    assert not static.match(replaced(5, torch.randn(5, 5)))
    assert not static.match(replaced(5, 3))
    assert not static.match(args[:5])
    # A tensor at the captured address (a view of the same memory, a backward's saved value
    # handed over as another object) is the same input.
    assert static.match(replaced(1, weights[1].view(3)))
    # An empty tensor has no memory to read: another empty one is as good.
    assert static.match(replaced(4, torch.randn(0)))


def test_a_captured_parameter_whose_memory_moved_no_longer_matches():
    # `p.data = other` keeps the Parameter object but moves its memory (Dynamo does not compile
    # again for it): a graph captured on the old address must not replay.
    from nimble_rs.dynamo.runtime.runner import StaticInputs

    weight, bias, user = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3)), torch.randn(2, 4)
    args = [weight, bias, user]
    static = StaticInputs(args, [0, 1])
    assert static.match(args) and static.match(tuple(args))
    weight.data = weight.data.clone()
    assert not static.match(args)
    static = StaticInputs(args, [0, 1])
    assert static.match(args)
    bias.data = torch.randn(3)
    assert not static.match(tuple(args))
    # Changed in place, the memory stays: the graph reads the new values there.
    static = StaticInputs(args, [0, 1])
    with torch.no_grad():
        weight.mul_(2.0)
    assert static.match(args)


