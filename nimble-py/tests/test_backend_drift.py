"""What Inductor writes, release by release: every statement of its program is read as what it is
or refused. A statement the reader does not know (a newer torch's) makes that graph run as
Inductor compiled it, with one warning naming the statement and the torch version, never a plan on
a guess. CI runs this file on the engine's torch and on the newest tested one."""

import importlib.util
import warnings

import pytest
import torch

import nimble_rs
from nimble_rs.dynamo.common import announce
from nimble_rs.dynamo.runtime import compiled as compiled_module
from nimble_rs.dynamo.program import kernels_plan
from nimble_rs.dynamo.program import wrapper as wrapper_module
from nimble_rs.dynamo.program.wrapper import CHECKS, DriftError, WrapperProgram
from nimble_rs.errors import InductorDriftWarning
from models import Inception, inductor_programs, relative_error


def test_every_check_inductor_writes_is_read_as_a_check_and_no_kernel_is_one():
    # torch 2.14 added assert_size_stride_grouped and assert_tensor_metadata: read as kernels,
    # they had turned Inception's 14 tasks into 26, with 43 of 49 edges through them.
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    (compiled, static), = inductor_programs(model, x)
    wrapper = WrapperProgram(kernels_plan.inductor_module(compiled), static)
    checks = [s for s in wrapper.statements if s.kind == "check"]
    assert checks, "Inductor wrote no size or stride check: the test would prove nothing"
    named = {s.node.value.func.id for s in checks}
    assert named <= CHECKS, named
    assert not [s.name for s in wrapper.statements if s.kind == "kernel" and s.name in CHECKS]
    # Every input a check names is read by no kernel through it: the weights stay unwritten.
    assert wrapper.written_inputs() == [], wrapper.written_inputs()


@pytest.fixture
def fresh_warnings(monkeypatch):
    """The backend's said-once warnings, as in a new process."""
    monkeypatch.setattr(announce, "_WARNED", set())


def test_an_unknown_statement_yields_one_warning_and_inductors_own_program_with_eagers_outputs(monkeypatch, fresh_warnings):
    # A torch whose checks this reader does not know, as 2.14's were to the reader of 2.11.
    monkeypatch.setattr(wrapper_module, "CHECKS", set())
    first, second = Inception(channels=8).eval(), Inception(channels=4).eval()
    x, y = torch.randn(2, 8, 12, 12), torch.randn(1, 4, 10, 10)
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got_first = torch.compile(first, backend="nimble")(x)
        got_second = torch.compile(second, backend="nimble")(y)
        expected_first, expected_second = first(x), second(y)
    drift = [w for w in seen if issubclass(w.category, InductorDriftWarning)]
    assert len(drift) == 1, [str(w.message) for w in seen]
    message = str(drift[0].message)
    assert torch.__version__ in message and "assert_" in message and "runs as Inductor compiled" in message.replace("run as", "runs as"), message
    reports = nimble_rs.dynamo.reports()[before:]
    assert len(reports) == 2 and all(r["drift"].startswith("assert_") and r["streams"] == 1 for r in reports), reports
    assert all(r["choice"] == "single" for r in reports), reports
    assert relative_error(got_first, expected_first) < 1e-5 and relative_error(got_second, expected_second) < 1e-5


PROGRAM = '''
import torch
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
aten = torch.ops.aten


def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    torch.add(arg0_1, 1, out=buf0)
    STATEMENT
    buf1 = aten.mul.Tensor(buf0, arg1_1)
    return (buf1, )
'''


def program(tmp_path, statement):
    path = tmp_path / f"drift_{abs(hash(statement))}.py"
    path.write_text(PROGRAM.replace("STATEMENT", statement))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return WrapperProgram(module, static_inputs=[1])


@pytest.mark.parametrize(
    "statement, form",
    [
        ("buf0.record_stream(stream1)", "buf0.record_stream"),  # streams in call(), 2.13+
        ("some_new_check(buf0, (4, 4), 'input')", "some_new_check"),
        ("triton_poi_fused_0.run(buf0, arg1_1, 16, stream=stream0)", "triton_poi_fused_0"),  # no source in the module
        ("with torch.cuda.stream(stream1):\n        aten.relu_.default(buf0)", "with"),
        ("buf0 = buf0 + arg1_1", "BinOp"),
    ],
)
def test_each_unknown_form_is_a_drift_error_naming_it(tmp_path, statement, form):
    with pytest.raises(DriftError) as raised:
        program(tmp_path, statement)
    assert raised.value.form == form, raised.value.form
    assert statement.split("\n")[0].split("(")[0].strip() in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "statement",
    [
        "assert_size_stride(buf0, (4, 4), (4, 1))",
        "assert_size_stride(buf0, (4, 4), (4, 1), 'input')",
        "assert_size_stride_grouped((buf0, arg1_1), ((4, 4), (4, 4)), ((4, 1), (4, 1)), 'input')",
        "assert_tensor_metadata(buf0, (4, 4), (4, 1), torch.float32, 'torch.ops.aten.add.out')",
        "assert_alignment(buf0, 16, 'input')",
        "s0 = buf0.size()",
    ],
)
def test_checks_and_metadata_of_every_supported_torch_touch_no_storage(tmp_path, statement):
    wrapper = program(tmp_path, statement)
    kernels = [s for s in wrapper.statements if s.kind == "kernel"]
    assert [s.name for s in kernels] == ["torch.add", "aten.mul.Tensor"], [s.name for s in kernels]
    assert wrapper.written_inputs() == []
