"""The backend's layout keeps its promises (issue 84): it is layered in subpackages of
``nimble_rs.dynamo`` (``common`` below everything; ``passes`` rewriting the graph; ``program``
reading and planning Inductor's program; ``runtime`` capturing, choosing and running; ``research``
for the kernel graphs), each layer imports only layers below it, the graph rewrites never import
the runtime that runs them, no module passes about 500 lines, and only ``nimble_rs.scheduling``
reaches the Rust extension. Imports inside functions count as imports."""

import ast
import pathlib

import nimble_rs

PACKAGE = pathlib.Path(nimble_rs.__file__).parent
DYNAMO = PACKAGE / "dynamo"
MAX_LINES = 500
# Each layer and the layers it may import (besides itself, the options and nimble_rs outside the
# backend). The entry (pipeline, the package's __init__) may import every layer.
BELOW = {
    "common": set(),
    "passes": {"common"},
    "program": {"common"},
    "regions": {"common", "program"},
    "research": {"common", "program"},
    "runtime": {"common", "program", "regions"},
}


def module_name(path: pathlib.Path) -> str:
    """``nimble_rs.dynamo.passes.fold`` for ``.../nimble_rs/dynamo/passes/fold.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: pathlib.Path):
    """Every module ``path`` imports, anywhere in the file, as absolute dotted names (relative
    imports resolved; ``from . import x`` names ``package.x``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def layer(name: str):
    """The backend layer a dotted module name belongs to (None: outside the backend's layers)."""
    parts = name.split(".")
    if parts[:2] != ["nimble_rs", "dynamo"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in BELOW else None


def test_every_layer_imports_only_the_layers_below_it():
    assert {p.name for p in DYNAMO.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {"regions"} == set(BELOW)
    offenders = []
    for path in sorted(DYNAMO.rglob("*.py")):
        own = layer(module_name(path))
        if own is None:
            continue  # the entry: pipeline, options, the package's __init__
        for name in sorted(imported(path)):
            other = layer(name)
            if other is not None and other != own and other not in BELOW[own]:
                offenders.append(f"{module_name(path)} ({own}) imports {name} ({other})")
            if name.startswith("nimble_rs.dynamo.pipeline"):
                offenders.append(f"{module_name(path)} imports the entry")
    assert not offenders, offenders


def test_the_passes_never_import_the_runtime():
    passes = sorted((DYNAMO / "passes").glob("*.py"))
    assert len(passes) > 5, "the passes moved: this test would prove nothing"
    offenders = [f"{module_name(p)} imports {n}" for p in passes for n in sorted(imported(p)) if layer(n) == "runtime"]
    assert not offenders, offenders


def test_no_module_of_the_backend_passes_500_lines():
    long = {str(p.relative_to(DYNAMO)): n for p in DYNAMO.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def test_only_the_scheduling_module_reaches_the_extension():
    reaching = []
    for path in PACKAGE.rglob("*.py"):
        if any(n.endswith("._sched") or n == "_sched" for n in imported(path)) or "_sched." in path.read_text():
            reaching.append(str(path.relative_to(PACKAGE)))
    assert reaching == ["scheduling.py"], reaching


def test_the_check_sees_imports_inside_functions_and_resolves_them():
    path = DYNAMO / "passes" / "fold.py"
    names = imported(path)
    assert "nimble_rs.dynamo.common.announce" in names and "nimble_rs.dynamo.passes.epilogue" in names, sorted(names)
    assert layer("nimble_rs.dynamo.runtime.runner.CapturedGraph") == "runtime" and layer("nimble_rs.errors") is None


def test_the_entry_stays_an_entry():
    # pipeline.py: the backend's entry and the regions granularity; the kernels granularity's
    # compile step lives in kernels.py, what both share in graphs.py.
    assert len((DYNAMO / "pipeline.py").read_text().splitlines()) <= 150


def test_the_experiments_time_with_one_cuda_event_timer():
    # experiments/python times every CUDA call through baselines.stamp (timed, timed_in_a_queue,
    # between_us): no script records CUDA events of its own.
    experiments = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "python"
    scripts = sorted(experiments.rglob("*.py"))
    assert len(scripts) > 20, "the experiments moved: this test would prove nothing"
    own = [str(p.relative_to(experiments)) for p in scripts if p.name != "baselines.py" and "torch.cuda.Event(" in p.read_text()]
    assert not own, f"CUDA events recorded outside baselines.py: {own}"
