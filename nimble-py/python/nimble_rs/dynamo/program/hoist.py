"""Kernels on weights alone, run once outside the CUDA graph (option ``hoist_weight_kernels``).

Inductor's program recomputes, on every call, what depends on parameters and buffers alone: on
a GPU above all the copy of each convolution's weight into the layout its convolution reads
(channels-last), dozens of small kernels per call at the head of every branch. Hoisted, they run
once before the graph is captured (the ``prologue``), their results are kept (``cache``), and the
graph reads them in place; they run again, before the next replay, only when a parameter they
read has changed as PyTorch tracks it: its memory (``p.data = other``) or its version counter
(in-place ops, optimizers, ``load_state_dict``). A write through ``p.data`` bumps no counter:
it is not seen, which is why the option is off by default.

Which kernels (``find``): those that read only parameters and buffers no kernel of the graph
writes (or what such kernels wrote before), write only whole buffers of their own (never an
input, never an output), and whose every reader reads the value through the names the kernel
wrote or views made of them after it (in the body each such kernel's statement becomes the
binding of those names to the kept values; ``emit`` writes it). Inductor reuses such a buffer for
the next weight of the same shape: each hoisted kernel's output is kept apart, so reuse among
them is no obstacle; reuse by any other kernel is, and keeps the kernel in the graph, as does
an update in place of a reused buffer (an ``in_out_ptr``: it reads the buffer's last value).

``separate`` keeps the same kernels in the graph, each writing a buffer of its own instead of the
one Inductor reused (option ``separate_weight_buffers``): exact, and no faster, as measured, but
what lets option ``weight_stream`` (on by default) run them on a stream of their own ahead of
their readers (``on_weights_alone``, ``WrapperProgram.set_aside``, ``kernels_plan.side_stream``).
"""

import ast
import copy
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from .signatures import dotted
from .wrapper import WrapperProgram


@dataclass
class Hoisting:
    # The hoisted kernel statements, in order, each with the names it writes.
    written: Dict[int, List[str]] = field(default_factory=dict)
    # The statements the prologue runs, in order: the hoisted kernels and what they need.
    prologue: List[int] = field(default_factory=list)
    # The graph's inputs the hoisted kernels read (parameters and buffers).
    inputs: List[int] = field(default_factory=list)
    # The statements that define the names bound to what they computed (allocations, aliases):
    # run in the prologue, not in the program.
    definers: List[int] = field(default_factory=list)
    # Kernels on weights alone that stay in the program, and why (the reason, then ": " and
    # the statements concerned, if any).
    refused: Dict[int, str] = field(default_factory=dict)

    @property
    def kernels(self) -> List[int]:
        return sorted(self.written)


def key(statement: int, name: str) -> str:
    """The cache's key of what statement ``statement`` wrote through ``name``."""
    return f"{statement}:{name}"


def _unchanged(program: WrapperProgram, mutated: Sequence[int]) -> Tuple[Set[int], Dict[int, Set[int]]]:
    """The storages of the parameters and buffers no kernel writes and the graph does not
    mutate, and for every storage the kernels that write it."""
    writers: Dict[int, Set[int]] = {}
    for s in program.statements:
        if s.kind == "kernel":
            for st in s.writes:
                writers.setdefault(st, set()).add(s.index)
    mutated_storages = {st for i in mutated if i < len(program.inputs) for st in program.storage.get(program.inputs[i], ())}
    return {st for st in program.static_storages if st not in writers and st not in mutated_storages}, writers


def on_weights_alone(program: WrapperProgram, mutated: Sequence[int] = ()) -> List[int]:
    """The kernel statements, in order, that compute from unchanging parameters and buffers
    alone (``WrapperProgram.weight_only``): what option ``weight_stream`` sets aside."""
    unchanged, _ = _unchanged(program, mutated)
    return program.weight_only(static=unchanged)


def find(program: WrapperProgram, mutated: Sequence[int] = ()) -> Hoisting:
    """The kernels of ``program`` that can be hoisted (see the module's documentation)."""
    statements = program.statements
    unchanged, writers = _unchanged(program, mutated)
    inputs = {st for name in program.inputs for st in program.storage.get(name, ())}
    returned = program._tensors(program.returned)
    definition: Dict[str, int] = {}
    definers_of: Dict[str, Set[int]] = {}
    for s in statements:
        for name in s.defines:
            definition.setdefault(name, s.index)
            definers_of.setdefault(name, set()).add(s.index)

    def extent(name: str, depth: int = 0) -> Optional[int]:
        # The elements of the buffer a name covers, where it covers a whole one densely from its
        # start: an allocation's, a plain alias of such a name, or Inductor's reuse of one for
        # another shape (``reinterpret_tensor(buf, size, stride, 0)`` over all of it).
        s = statements[definition[name]] if name in definition else None
        if s is None or depth > 100:
            return None
        value = s.node.value if isinstance(s.node, ast.Assign) else None
        if s.kind == "alloc":
            return _dense_extent(value.args[:2]) if isinstance(value, ast.Call) and len(value.args) >= 2 else None
        if s.kind != "alias":
            return None
        if isinstance(value, ast.Name):
            return extent(value.id, depth + 1)
        if isinstance(value, ast.Call) and dotted(value.func).endswith("reinterpret_tensor") and len(value.args) == 4 and isinstance(value.args[0], ast.Name):
            covered = extent(value.args[0].id, depth + 1)
            offset = _literal(value.args[3])
            return covered if covered is not None and offset == 0 and _dense_extent(value.args[1:3]) == covered else None
        return None

    def whole(name: str) -> bool:
        return extent(name) is not None

    def fresh(name: str) -> bool:
        # Defined by an allocation of its own (not Inductor's reuse of an earlier buffer).
        return name in definition and statements[definition[name]].kind == "alloc"

    written: Dict[int, List[str]] = {}
    refused: Dict[int, str] = {}
    for index in program.weight_only(static=unchanged):
        written_names = _written_names(program, statements[index])
        names = [n for n, _ in written_names] if written_names is not None else None
        if names is None or not all(whole(n) for n in names):
            refused[index] = "it writes through a view, or returns its output"
        elif not all(pure or fresh(n) for n, pure in written_names):
            # Reading a reused buffer's last value (Inductor's in-place reuse), it needs that
            # buffer, not one of its own.
            refused[index] = "it updates a reused buffer in place"
        elif statements[index].writes & (inputs | returned):
            refused[index] = "it writes a graph input or output"
        else:
            written[index] = names
    while True:
        hoisted = set(written)
        failed: Dict[int, str] = {}
        # Every writer of a hoisted kernel's storage is hoisted; what it reads is an unchanged
        # parameter or buffer or a hoisted kernel's output; its prologue needs no other kernel.
        derived = set(unchanged) | {st for i in hoisted for st in statements[i].writes}
        for i in hoisted:
            others = sorted({w for st in statements[i].writes for w in writers[st]} - hoisted)
            if others:
                failed[i] = f"its buffer is written by a kernel left in the program: {statements[others[0]].name} (statement {others[0]})"
            elif not statements[i].reads <= derived:
                failed[i] = "it reads what a kernel left in the program wrote"
        # The names bound in the program are defined only by allocations and aliases that
        # define nothing else (they move to the prologue).
        bound = {n for i in hoisted for n in written[i]}
        for i in hoisted:
            for name in written[i]:
                if any(statements[d].kind not in ("alloc", "alias") or not set(statements[d].defines) <= bound for d in definers_of.get(name, ())):
                    failed.setdefault(i, f"the statement defining {name} defines more")
        closure = {}
        for i in hoisted - set(failed):
            closure[i] = _closure(program, i, hoisted)
            if closure[i] is None:
                failed[i] = "a name it needs is defined by a kernel left in the program"
        for i, reason in _read_elsewhere(program, hoisted - set(failed), written).items():
            failed.setdefault(i, reason)
        if not failed:
            break
        for i, reason in failed.items():
            del written[i]
            refused[i] = reason
    prologue = {j for i in written for j in closure[i]} | set(written)
    if written:
        # Triton launches name the raw stream (``stream=stream0``), which their statements do not
        # count among their uses: its definition, and the host's statements before it, too.
        for s in statements:
            if s.index < max(written) and set(s.defines) & program.stream_variables:
                prologue |= _closure(program, s.index, set()) or {s.index}
    prologue = sorted(prologue)
    read = {st for i in written for st in statements[i].reads}
    used = [i for i, name in enumerate(program.inputs) if program.storage.get(name, set()) & read]
    definers = sorted({d for i in written for n in written[i] for d in definers_of.get(n, ())})
    return Hoisting(written=written, prologue=prologue, inputs=used, definers=definers, refused=refused)


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _dense_extent(size_and_stride: Sequence[ast.AST]) -> Optional[int]:
    """The number of elements of a layout given as literal (size, stride) tuples, if it covers
    them densely (no gap, no overlap), else None."""
    size, stride = (_literal(n) for n in size_and_stride)
    if not isinstance(size, tuple) or not isinstance(stride, tuple) or len(size) != len(stride):
        return None
    if not all(isinstance(v, int) for v in size + stride):
        return None
    numel = 1
    for v in size:
        numel *= v
    span = 1 + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)
    return numel if numel == 0 or span == numel else None


def _written_names(program: WrapperProgram, s) -> Optional[List[Tuple[str, bool]]]:
    """The names through which kernel statement ``s`` writes, each with whether it only writes
    it (an ``out_ptr`` parameter, ``out=``), if it writes only through bare names (no view made
    in the call) and defines none (its outputs are its arguments)."""
    if s.defines or not isinstance(s.node, ast.Expr) or not isinstance(s.node.value, ast.Call):
        return None
    call = s.node.value
    pure = program.signatures.pure_writes(program._kernel_name(call)) or []
    names: List[Tuple[str, bool]] = []
    covered: Set[int] = set()
    arguments = [(a, i < len(pure) and pure[i]) for i, a in enumerate(call.args)] + [(k.value, k.arg == "out") for k in call.keywords if k.arg != "stream"]
    for argument, only_written in arguments:
        touched = program._tensors(argument)
        if not touched & s.writes:
            continue
        if not isinstance(argument, ast.Name):
            return None
        names.append((argument.id, only_written))
        covered |= touched
    return names if names and s.writes <= covered else None


def _closure(program: WrapperProgram, index: int, hoisted: Set[int]) -> Optional[Set[int]]:
    """Kernel statement ``index`` and the statements it needs that are not kernels
    (allocations, aliases, the host's), through such statements; None if one of those needs a
    kernel that is not hoisted (a name it defines). The kernel's own needs on kernels order it
    among their accesses to storages, which the prologue keeps apart: it runs them in order."""
    found = {index}
    pending = [index]
    while pending:
        i = pending.pop()
        for j in program.needs[i]:
            if j in found or program.statements[j].kind in ("del", "check"):
                continue
            if program.statements[j].kind == "kernel":
                if i != index and j not in hoisted:
                    return None
                continue
            found.add(j)
            pending.append(j)
    return found


def _read_elsewhere(program: WrapperProgram, hoisted: Set[int], written: Dict[int, List[str]]) -> Dict[int, str]:
    """The hoisted kernels whose output some kernel left in the graph reads through a name that
    is not bound to it in the body (a name the kernel did not write, nor a view made of one
    after it), and that reader."""
    failed: Dict[int, str] = {}
    statements = program.statements
    storages = {st for i in hoisted for st in statements[i].writes}
    names_of: Dict[int, Set[str]] = {}
    for name, stored in program.storage.items():
        for st in stored & storages:
            names_of.setdefault(st, set()).add(name)
    for st in storages:
        owner: Optional[int] = None
        bound: Set[str] = set()
        for s in statements:
            if s.index in hoisted and st in s.writes:
                owner, bound = s.index, set(written[s.index])
                continue
            if s.kind == "alias" and s.uses & bound:
                bound |= set(s.defines)
            elif s.kind == "kernel" and st in (s.reads | s.writes) and s.index not in hoisted:
                if owner is not None and (s.uses & names_of[st]) - bound:
                    failed.setdefault(owner, f"a kernel left in the program reads its output through another name: {s.name} (statement {s.index}) through {sorted((s.uses & names_of[st]) - bound)[0]}")
    return failed


def separate(program: WrapperProgram, hoisting: Hoisting) -> Dict[int, ast.stmt]:
    """Statements to read in place of Inductor's (``WrapperProgram(rewrite=...)``) so that
    each kernel on weights alone ``hoisting`` found writes a buffer of its own: where Inductor
    gave it an earlier buffer (``buf7 = buf3``, or ``reinterpret_tensor`` of one for another
    shape), a new allocation of the same layout. Exact, and the kernels still run in the
    program, on every call; what it removes are the dependencies the shared buffer made: the
    next weight's copy waited for every reader of the last one, so branches that read weights
    of one shape ran one after another."""
    statements = program.statements
    definition: Dict[str, int] = {}
    for s in statements:
        for name in s.defines:
            definition.setdefault(name, s.index)

    def layout(name: str, depth: int = 0):
        # (size, stride, the allocation it comes from) of a whole buffer's name.
        s = statements[definition[name]]
        value = s.node.value
        if s.kind == "alloc" or depth > 100:
            return value.args[0], value.args[1], value
        if isinstance(value, ast.Name):
            return layout(value.id, depth + 1)
        size, stride, root = value.args[1], value.args[2], layout(value.args[0].id, depth + 1)[2]
        return size, stride, root

    rewrite: Dict[int, ast.stmt] = {}
    for d in hoisting.definers:
        s = statements[d]
        if s.kind != "alias":
            continue
        size, stride, root = layout(s.defines[0])
        allocation = ast.Call(func=copy.deepcopy(root.func), args=[copy.deepcopy(size), copy.deepcopy(stride)] + [copy.deepcopy(a) for a in root.args[2:]], keywords=copy.deepcopy(root.keywords))
        rewrite[d] = ast.fix_missing_locations(ast.Assign(targets=[ast.Name(id=s.defines[0], ctx=ast.Store())], value=allocation))
    return rewrite


def prologue_function(program: WrapperProgram, hoisting: Hoisting):
    """``nimble_prologue(args, cache)``: the hoisted kernels and what they need, in Inductor's
    order, each kernel's outputs then kept in ``cache`` (copied into what it holds already, so
    that the addresses a captured graph reads stay)."""
    body: List[ast.stmt] = []
    for i in hoisting.prologue:
        body.append(copy.deepcopy(program.statements[i].node))
        for name in hoisting.written.get(i, ()):
            body += ast.parse(f"_nimble_keep(_nimble_cache, {key(i, name)!r}, {name})").body
    return program.compile_function(body, "nimble_prologue(args, _nimble_cache)", "prologue", _nimble_keep=_keep)[0]


def _keep(cache: Dict[str, torch.Tensor], name: str, value: torch.Tensor) -> None:
    kept = cache.get(name)
    if kept is None:
        kept = cache[name] = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=value.device)
    kept.copy_(value)


def bindings(hoisting: Hoisting) -> List[ast.stmt]:
    """The program's first statements: the names the hoisted kernels wrote bound to the kept
    values (each name is one kernel's: Inductor names every buffer once)."""
    return [ast.parse(f"{name} = _nimble_cache[{key(i, name)!r}]").body[0] for i in hoisting.kernels for name in hoisting.written[i]]


class Prologue:
    """The hoisted kernels of one program at run time: ``prepare(args)`` runs them when what
    they read has changed (or never ran), on the current stream, before the graph."""

    def __init__(self, program: WrapperProgram, hoisting: Hoisting):
        self.hoisting = hoisting
        self.cache: Dict[str, torch.Tensor] = {}
        self.function = prologue_function(program, hoisting)
        self.seen: Optional[tuple] = None
        self.untracked = False

    def _state(self, args: Sequence[Any]) -> Optional[tuple]:
        try:
            return tuple((args[i].data_ptr(), args[i]._version) for i in self.hoisting.inputs)
        except RuntimeError:
            # An inference tensor has no version counter: the kernels run on every call.
            if not self.untracked:
                warnings.warn("nimble backend: option hoist_weight_kernels: a parameter or buffer has no version counter (an inference tensor); the hoisted kernels run before every call", RuntimeWarning, stacklevel=4)
            self.untracked = True
            return None

    def prepare(self, args: Sequence[Any]) -> None:
        state = self._state(args)
        if state is None or state != self.seen:
            self.function(list(args), self.cache)
            self.seen = state

    def release(self) -> None:
        """Frees the kept values (the choice kept Inductor's own program); a later ``prepare``
        makes them again."""
        self.cache.clear()
        self.seen = None

    @property
    def bytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in self.cache.values())
