"""The vocabulary of Inductor's program as ``wrapper`` reads it: the calls that allocate, view,
check or read metadata, a statement and a task, the errors of a program it cannot read, and
the ``call`` function found in Inductor's module."""

import ast
from dataclasses import dataclass, field
from typing import Any, Dict, List, Set, Tuple

# Calls that allocate a new, uninitialised tensor.
ALLOCATORS = {"empty_strided_cuda", "empty_strided_cpu", "empty_strided_xpu", "empty_strided", "empty_strided_cpu_pinned", "empty", "zeros", "full"}
# Calls that return a view of their first argument.
VIEWS = {"reinterpret_tensor", "as_strided", "view"}
# Calls that only look at a tensor's metadata: Inductor's checks of sizes, strides, dtypes and
# alignment. assert_size_stride and assert_alignment since 2.11 (at least); 2.14 added
# assert_size_stride_grouped (several inputs in one call) and assert_tensor_metadata (an
# extern kernel's result, with its dtype).
CHECKS = {"assert_size_stride", "assert_alignment", "assert_size_stride_grouped", "assert_tensor_metadata"}
# Methods of a tensor that read its metadata alone (Inductor's dynamic shapes: ``s0 = x.size()``).
METADATA = {"size", "stride", "storage_offset", "dim", "numel", "data_ptr"}
# Control flow Inductor writes for torch.cond and while_loop: read as one task over every tensor
# it names.
CONTROL_FLOW = (ast.If, ast.While, ast.For)


class WrapperError(Exception):
    """Inductor's ``call`` has a shape this module does not read."""


class DriftError(WrapperError):
    """A statement of Inductor's ``call`` this module does not know (a newer torch's): ``form``
    is what it is (the function called, or the kind of statement), ``statement`` its text."""

    def __init__(self, form: str, statement: ast.AST, why: str):
        self.form = form
        self.statement = ast.unparse(statement)
        text = self.statement if len(self.statement) <= 100 else self.statement[:97] + "..."
        super().__init__(f"{why}: `{text}`")


@dataclass
class Statement:
    index: int
    node: ast.stmt
    kind: str  # kernel, alloc, alias, del, check, host
    defines: List[str] = field(default_factory=list)
    uses: Set[str] = field(default_factory=set)
    reads: Set[int] = field(default_factory=set)
    writes: Set[int] = field(default_factory=set)
    name: str = ""
    # Storages the kernel touches only in a part (``slices.Part``), through views of it.
    parts: Dict[int, Any] = field(default_factory=dict)


@dataclass
class Task:
    """Kernel statements planned as one task (a kernel on weights alone joins its reader)."""

    id: int
    statements: List[int]
    name: str


def call_function(module) -> Tuple[ast.FunctionDef, ast.Module]:
    """Inductor's ``call`` in ``module`` and the module's source, parsed."""
    source = module.__loader__.get_source(module.__name__) if getattr(module, "__loader__", None) else None
    if source is None:
        with open(module.__file__) as f:
            source = f.read()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node, tree
    raise WrapperError("no call function in Inductor's module")
