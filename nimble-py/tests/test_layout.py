"""The backend's layout keeps its promises (issue 84): the graph rewrites never import the
runtime that runs them, no module passes about 500 lines, and only ``nimble_rs.scheduling``
reaches the Rust extension. Imports inside functions count as imports."""

import ast
import pathlib

import nimble_rs

PACKAGE = pathlib.Path(nimble_rs.__file__).parent
DYNAMO = PACKAGE / "dynamo"
# The rewrites of AOTAutograd's graph before Inductor compiles it, and what they share.
PASSES = {"fold", "products", "depthwise", "depthwise_kernel", "depthwise_ahead", "depthwise_triton", "depthwise_worker", "epilogue", "concat", "merge", "fxnodes"}
# What captures, chooses and runs the compiled programs, and the entry that drives it all.
RUNTIME = {"runner", "compiled", "pipeline"}
MAX_LINES = 500


def imported_modules(path: pathlib.Path):
    """The sibling modules ``path`` imports (``from . import x``, ``from .x import y``), anywhere
    in the file, and every dotted name it imports."""
    siblings, names = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                siblings.add(node.module.split(".")[0])
            elif node.level == 1:
                siblings.update(alias.name for alias in node.names)
            names.add(node.module or "")
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return siblings, names


def test_the_passes_never_import_the_runtime():
    assert PASSES <= {p.stem for p in DYNAMO.glob("*.py")}, "a pass named here was renamed or removed"
    offenders = []
    for name in sorted(PASSES):
        siblings, _ = imported_modules(DYNAMO / f"{name}.py")
        offenders += [f"{name} imports {runtime}" for runtime in sorted(siblings & RUNTIME)]
    assert not offenders, offenders


def test_no_module_of_the_backend_passes_500_lines():
    long = {p.name: n for p in DYNAMO.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def test_only_the_scheduling_module_reaches_the_extension():
    reaching = []
    for path in PACKAGE.rglob("*.py"):
        _, names = imported_modules(path)
        if "_sched" in names or "_sched." in path.read_text():
            reaching.append(str(path.relative_to(PACKAGE)))
    assert reaching == ["scheduling.py"], reaching


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from .runner import graph_us\n    from . import compiled\n")
    assert imported_modules(module)[0] == {"runner", "compiled"}
