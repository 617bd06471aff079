"""Which arguments each kernel of an Inductor module writes, read from the module's source:
Triton kernels' parameter names (only ``in_ptr*`` is read alone), C++ kernels' pointer types
(``const`` pointers are read), and the AST helpers the wrapper's readers share."""

import ast
import re
from typing import Dict, List, Optional, Set


def dotted(node: ast.AST) -> str:
    """A name or attribute chain as written (``async_compile.triton``), else ``""``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def names_in(node: ast.AST) -> Set[str]:
    """Every plain name ``node`` mentions."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class KernelSignatures:
    """Which arguments each kernel of the module writes, from its source: Triton kernels'
    parameter names, C++ kernels' pointer types. ``writes(kernel)`` is a list of booleans per
    positional argument, or None when unknown."""

    def __init__(self, module: ast.Module):
        """``module``: the module's source, parsed."""
        self.by_kernel: Dict[str, List[bool]] = {}
        # The parameters' names where the source gives them (``out_ptr*``: written, not read).
        self.names: Dict[str, List[str]] = {}
        for statement in module.body:
            if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) and len(statement.targets) == 1):
                continue
            target, call = statement.targets[0], statement.value
            if not isinstance(target, ast.Name):
                continue
            how = dotted(call.func)
            if how == "async_compile.triton" and len(call.args) >= 2:
                self._triton(target.id, call.args[1])
            elif how == "async_compile.cpp_pybinding" and call.args and isinstance(call.args[0], ast.List):
                types = [e.value for e in call.args[0].elts if isinstance(e, ast.Constant)]
                self.by_kernel[target.id] = ["*" in t and not t.startswith("const") for t in types]
                if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
                    found = re.search(r'extern "C"[^(]*\bkernel\(([^)]*)\)', call.args[1].value)
                    names = [p.strip().split()[-1].lstrip("*&") for p in found.group(1).split(",") if p.strip()] if found else []
                    if len(names) == len(types):
                        self.names[target.id] = names

    def _triton(self, name: str, source: ast.AST) -> None:
        if not isinstance(source, ast.Constant) or not isinstance(source.value, str):
            return
        try:
            tree = ast.parse(source.value)
        except SyntaxError:
            return
        # The kernel is the function of its own name (Inductor names it as the variable). Before
        # it the source may define helpers, themselves @triton.jit: a scan's combine function
        # (``_triton_helper_fn_add0(arg0_0, arg1_0)`` for a cumulative sum), which is not the
        # kernel launched. Without a function of the name, the one Inductor's launch heuristics
        # decorate, or the only function; else none is taken, and a launch of it is drift.
        functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
        kernel = next((f for f in functions if f.name == name), None)
        if kernel is None:
            launched = [f for f in functions if any(dotted(getattr(d, "func", d)).startswith("triton_heuristics.") for d in f.decorator_list)]
            kernel = launched[0] if len(launched) == 1 else functions[0] if len(functions) == 1 else None
        if kernel is None:
            return
        params = [a for a in kernel.args.args if "constexpr" not in ast.unparse(a.annotation or ast.Constant(""))]
        # Only pointers named as inputs are read alone; outputs, in-place and workspace pointers,
        # and names a template chose, are taken as written.
        self.by_kernel[name] = [not a.arg.startswith("in_ptr") for a in params]
        self.names[name] = [a.arg for a in params]

    def writes(self, kernel: str) -> Optional[List[bool]]:
        return self.by_kernel.get(kernel)

    def pure_writes(self, kernel: str) -> Optional[List[bool]]:
        """Per positional argument, whether the kernel writes it without reading it (Inductor
        names such parameters ``out_ptr*``; ``in_out_ptr*`` are updated in place), or None."""
        names = self.names.get(kernel)
        return [n.startswith("out_ptr") for n in names] if names is not None else None
