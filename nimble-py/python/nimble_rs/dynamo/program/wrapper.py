"""Inductor's own program, read back: the ``call`` function of the Python module Inductor
generates for a whole graph, as statements with the storages each one reads and writes and the
statements each must follow, and its kernels as a task graph in the project's JSON schema
(``emit`` writes the statements again in a plan's order, each kernel on its stream).

Inductor compiles the graph once, fusing and reusing buffers as it would for one stream; Nimble
then schedules those kernels. What each statement touches is read from the code itself:
a Triton kernel writes the parameters its source does not name ``in_ptr*``; a C++ kernel the
pointers its binding does not declare ``const``; an extern kernel its ``out=``; an in-place op
(a name ending in ``_``) its first argument; Inductor's checks and a tensor's metadata nothing.
Anything else over tensors (a newer torch's statement) is a ``DriftError``: the graph then runs
as Inductor compiled it, announced, instead of being planned on a guess. Names map to storages:
an allocation makes one, ``buf5 = buf0`` (Inductor's reuse) and ``reinterpret_tensor(buf0,
...)`` share one, an op's result is new (and, unless it is an extern kernel's, may alias its
arguments). Reads and writes of a storage are ordered as
written (``taskgraph.Accesses``), so Inductor's buffer reuse becomes ordinary dependencies the
plan keeps; but kernels that write disjoint parts of one allocation, each through its own view
(``reinterpret_tensor`` of an ``empty_strided`` with literal sizes and strides, as Inductor
writes a join's slices), follow none of each other (``slices``)."""

import ast
import copy
import sys
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from . import slices
from .signatures import KernelSignatures, dotted, names_in
from .statements import (  # noqa: F401 - the reader's vocabulary, re-exported for its users
    ALLOCATORS,
    CHECKS,
    CONTROL_FLOW,
    METADATA,
    VIEWS,
    DriftError,
    Statement,
    Task,
    WrapperError,
    call_function,
)
from .taskgraph import Accesses


class WrapperProgram:
    """The statements of Inductor's ``call`` for one graph, their storages and dependencies."""

    def __init__(self, module, static_inputs: Sequence[int] = (), rewrite: Optional[Dict[int, ast.stmt]] = None, disjoint_slices: bool = True):
        """``rewrite``: statements (by index) to read in place of Inductor's (``hoist.separate``)."""
        self.module = module
        self.static_inputs = list(static_inputs)
        self.namespace = vars(module)
        function, tree = call_function(module)
        self.signatures = KernelSignatures(tree)
        if "self" in {n.id for n in ast.walk(ast.Module(body=function.body, type_ignores=[])) if isinstance(n, ast.Name)}:
            raise WrapperError("Inductor's call uses its runner (graph partitions)")
        body = list(function.body)
        if not body or not isinstance(body[-1], ast.Return):
            raise WrapperError("Inductor's call does not end in a return")
        self.returned = body.pop()
        # The device guard (`with torch.cuda._DeviceGuard(0):`) holds most of the body: its
        # statements are read in line, the guard is kept around the whole emitted body.
        self.guard: Optional[ast.With] = None
        flat: List[ast.stmt] = []
        for statement in body:
            if isinstance(statement, ast.With) and dotted(statement.items[0].context_expr.func if isinstance(statement.items[0].context_expr, ast.Call) else statement.items[0].context_expr).endswith("DeviceGuard") and self.guard is None:
                self.guard = statement
                flat.extend(statement.body)
            else:
                flat.append(statement)
        self.statements: List[Statement] = []
        self.storage: Dict[str, Set[int]] = {}
        # Names of tensors allocated with literal sizes and strides: those; views of a part of
        # one: the part (``slices``). The allocation statement of each such storage.
        self.layout: Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...]]] = {}
        self.part: Dict[str, Any] = {}
        self.allocation: Dict[int, int] = {}
        self.stream_variables: Set[str] = set()
        self.disjoint_slices = disjoint_slices
        self._storages = 0
        self.inputs: List[str] = []
        for index, statement in enumerate(flat):
            self.statements.append(self._read(index, (rewrite or {}).get(index, statement)))
        self.static_storages = {s for i in static_inputs if i < len(self.inputs) for s in self.storage.get(self.inputs[i], ())}
        self._dependencies()
        # Statements run before the program instead of in it (``hoist``): the hoisted kernels
        # and the definitions of the names bound to what they computed.
        self.hoisting = None
        self.skipped: Set[int] = set()
        # Kernels on weights alone run on a stream of their own ahead of the plan (``side``):
        # the last tasks, left out of the planned task graph (the first ``planned`` tasks).
        self.side: List[int] = []
        self.tasks = self._tasks()

    # -- reading ---------------------------------------------------------------------------
    def _new_storage(self) -> Set[int]:
        self._storages += 1
        return {self._storages}

    def _tensors(self, node: ast.AST) -> Set[int]:
        found: Set[int] = set()
        for name in names_in(node):
            found |= self.storage.get(name, set())
        return found

    def _read(self, index: int, node: ast.stmt) -> Statement:
        uses = names_in(node)
        if isinstance(node, ast.Delete):
            return Statement(index, node, "del", uses=uses)
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            targets = [target.id] if isinstance(target, ast.Name) else [e.id for e in target.elts if isinstance(e, ast.Name)] if isinstance(target, ast.Tuple) else []
            for name in targets:
                self.layout.pop(name, None)
                self.part.pop(name, None)
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Name) and value.id == "args":
                # The graph's inputs: a storage each.
                self.inputs = targets
                for name in targets:
                    self.storage[name] = self._new_storage()
                return Statement(index, node, "host", defines=targets, uses=uses - set(targets))
            uses -= set(targets)
            if isinstance(value, ast.Call) and dotted(value.func).endswith("get_raw_stream"):
                self.stream_variables.update(targets)
                return Statement(index, node, "host", defines=targets, uses=uses)
            if isinstance(value, ast.Name) or isinstance(value, ast.Subscript) or (isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] in VIEWS and value.args):
                source = value if not isinstance(value, ast.Call) else value.args[0]
                shared = self._tensors(source)
                if shared:
                    for name in targets:
                        self.storage[name] = set(shared)
                        self._view(name, value)
                    return Statement(index, node, "alias", defines=targets, uses=uses)
            # (Its arguments may name a size a graph input carries, with dynamic shapes: no tensor.)
            if isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] in ALLOCATORS:
                layout = slices.literal_layout(value)
                for name in targets:
                    self.storage[name] = self._new_storage()
                    if layout is not None and len(targets) == 1:
                        self.layout[name] = layout
                        self.allocation[min(self.storage[name])] = index
                return Statement(index, node, "alloc", defines=targets, uses=uses)
            if isinstance(value, ast.Call):
                reads, writes = self._accesses(value)
                if not reads and not writes:
                    return Statement(index, node, "host", defines=targets, uses=uses)
                fresh = self._new_storage()
                # An extern kernel returns a new tensor, an ATen op what its schema says; any
                # other call might return a view of what it was given.
                schema = self._schema(value)
                if dotted(value.func).startswith("extern_kernels."):
                    result = fresh
                elif schema is not None:
                    result = fresh | self._schema_aliases(value, schema)
                else:
                    result = fresh | reads | writes
                for name in targets:
                    self.storage[name] = set(result)
                return Statement(index, node, "kernel", defines=targets, uses=uses, reads=reads, writes=writes | fresh, name=self._kernel_name(value), parts=self._parts(value))
            if self._tensors(value):
                raise DriftError(type(value).__name__, node, "an assignment of an unknown form")
            return Statement(index, node, "host", defines=targets, uses=uses)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            if dotted(call.func) in CHECKS:
                return Statement(index, node, "check", uses=uses)
            reads, writes = self._accesses(call)
            if reads or writes:
                return Statement(index, node, "kernel", uses=uses - self.stream_variables, reads=reads, writes=writes, name=self._kernel_name(call), parts=self._parts(call))
            return Statement(index, node, "host", uses=uses)
        if self._tensors(node) and not isinstance(node, CONTROL_FLOW):
            # A stream block (2.13+), or anything else over tensors this module does not read.
            raise DriftError(type(node).__name__.lower(), node, "a statement of an unknown kind")
        if self._tensors(node):
            # Inductor's control flow: one task that reads and writes every tensor it names.
            touched = self._tensors(node)
            defined = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
            for name in defined:
                self.storage[name] = self._new_storage() | touched
            return Statement(index, node, "kernel", defines=defined, uses=uses, reads=touched, writes=touched, name=type(node).__name__.lower())
        return Statement(index, node, "host", uses=uses)

    def _view(self, name: str, value: ast.AST) -> None:
        """What ``name = value`` (a name, or a view of one) covers of an allocation with a
        literal layout: all of it with that layout (``x = buf3``), or a part of it
        (``reinterpret_tensor(buf8, sizes, strides, offset)`` with its strides); nothing known
        otherwise."""
        if isinstance(value, ast.Name):
            if value.id in self.layout:
                self.layout[name] = self.layout[value.id]
            if value.id in self.part:
                self.part[name] = self.part[value.id]
            return
        if not (isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] == "reinterpret_tensor" and len(value.args) == 4):
            return
        base, view = value.args[0], slices.literal_view(value)
        if isinstance(base, ast.Name) and base.id in self.layout and base.id not in self.part and view is not None:
            found = slices.part(*self.layout[base.id], *view)
            if found is not None:
                self.part[name] = found

    def _parts(self, call: ast.Call) -> Dict[int, Any]:
        """The storages ``call`` touches only through views of one part of them, and the part
        (none unless ``disjoint_slices``)."""
        if not self.disjoint_slices:
            return {}
        parts: Dict[int, Any] = {}
        whole: Set[int] = set()
        for name in names_in(call):
            for storage in self.storage.get(name, ()):
                part = self.part.get(name) if len(self.storage[name]) == 1 else None
                if part is None or parts.get(storage, part) != part:
                    whole.add(storage)
                parts[storage] = part
        return {st: part for st, part in parts.items() if st not in whole}

    def _kernel_name(self, call: ast.Call) -> str:
        name = dotted(call.func)
        return name[: -len(".run")] if name.endswith(".run") else name

    def _accesses(self, call: ast.Call) -> Tuple[Set[int], Set[int]]:
        """The storages a call reads and writes. A call over tensors of a form this module does
        not know (an unknown function, a kernel whose parameters the module does not declare)
        is a ``DriftError``: never guessed at."""
        function = dotted(call.func)
        kernel = function[: -len(".run")] if function.endswith(".run") else function
        known = self.signatures.writes(kernel)
        keywords = [k for k in call.keywords if k.arg != "stream"]
        if known is not None and len(known) == len(call.args):
            # A Triton or C++ kernel of the module: its parameters say which it writes.
            written = [a for a, w in zip(call.args, known) if w] + [k.value for k in keywords]
            return self._written_and_read(written, [a for a, w in zip(call.args, known) if not w])
        schema = self._schema(call)
        if schema is not None:
            # An ATen op (Inductor's fallback): its schema marks the arguments it writes.
            pairs = list(self._schema_arguments(call, schema))
            is_written = lambda argument: argument.alias_info is not None and argument.alias_info.is_write
            return self._written_and_read([v for a, v in pairs if is_written(a)], [v for a, v in pairs if not is_written(a)])
        out = [k.value for k in keywords if k.arg == "out"]
        others = list(call.args) + [k.value for k in keywords if k.arg != "out"]
        if out:
            return self._written_and_read(out, others)
        in_place = any(p.endswith("_") and not p.startswith("_") for p in function.split(".")[-2:])
        if in_place and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and self._tensors(call.func.value):
            # tensor.copy_(...), tensor.zero_(): the tensor is written.
            return self._written_and_read([call.func.value], others)
        if in_place and call.args:
            return self._written_and_read([call.args[0]], others[1:])
        method = function.split(".")[-1]
        if method in METADATA and isinstance(call.func, ast.Attribute) and not call.args and not self._tensors(call).difference(self._tensors(call.func.value)):
            # x.size(), x.stride(): the tensor's metadata, read on the host.
            return set(), set()
        if not self._tensors(call):
            return set(), set()
        if known is None and function.endswith(".run"):
            raise DriftError(kernel, call, "a kernel whose parameters Inductor's module does not declare")
        if not function.startswith(("extern_kernels.", "aten.", "torch.ops.")):
            raise DriftError(function or type(call.func).__name__, call, "an unknown call over tensors")
        return self._written_and_read([], others)

    def _written_and_read(self, written: Sequence[ast.AST], read: Sequence[ast.AST]) -> Tuple[Set[int], Set[int]]:
        """(storages read, storages written) by a call that writes ``written`` and reads
        ``read``; a storage both read and written counts as written."""
        writes: Set[int] = set()
        for node in written:
            writes |= self._tensors(node)
        reads: Set[int] = set()
        for node in read:
            reads |= self._tensors(node)
        return reads - writes, writes

    def _schema(self, call: ast.Call):
        """The schema of the ATen overload a call names (``aten.x.default``,
        ``torch.ops.aten.x.default``), if it names one."""
        parts = dotted(call.func).split(".")
        if not parts[0] or not (parts[0] in ("aten", "torch") and len(parts) >= 3):
            return None
        value = self.namespace.get(parts[0])
        for part in parts[1:]:
            value = getattr(value, part, None)
            if value is None:
                return None
        return getattr(value, "_schema", None)

    def _schema_arguments(self, call: ast.Call, schema):
        """(schema argument, the call's value for it) for every argument the call passes."""
        by_name = {k.arg: k.value for k in call.keywords}
        for i, argument in enumerate(schema.arguments):
            if i < len(call.args) and not argument.kwarg_only:
                yield argument, call.args[i]
            elif argument.name in by_name:
                yield argument, by_name[argument.name]

    def _schema_aliases(self, call: ast.Call, schema) -> Set[int]:
        """The storages of the arguments the op's results may share (a view, an in-place op's
        result)."""
        sets = set()
        for returned in schema.returns:
            if returned.alias_info is not None:
                sets |= set(returned.alias_info.before_set)
        shared: Set[int] = set()
        for argument, value in self._schema_arguments(call, schema):
            if argument.alias_info is not None and set(argument.alias_info.before_set) & sets:
                shared |= self._tensors(value)
        return shared

    # -- dependencies ----------------------------------------------------------------------
    def _dependencies(self) -> None:
        """``needs[i]``: the statements ``i`` must follow: the definitions of the names it uses,
        for a redefinition or a ``del`` every earlier use of the name, the kernels whose
        storage accesses it must follow, and for host statements the host statement before."""
        self.needs: List[Set[int]] = [set() for _ in self.statements]
        definition: Dict[str, int] = {}
        users: Dict[str, List[int]] = {}
        accesses = Accesses()
        last_host: Optional[int] = None
        for s in self.statements:
            needs = self.needs[s.index]
            for name in s.uses:
                if name in definition:
                    needs.add(definition[name])
                users.setdefault(name, []).append(s.index)
            if s.kind == "del":
                for name in s.uses:
                    needs.update(users.get(name, []))
            for name in s.defines:
                needs.update(users.get(name, []))
                definition[name] = s.index
                users[name] = []
            if s.kind == "kernel":
                needs.update(accesses.access(s.index, s.reads, s.writes, s.parts))
            if s.kind == "host":
                if last_host is not None:
                    needs.add(last_host)
                last_host = s.index
            needs.discard(s.index)

    def exclude(self, hoisting) -> None:
        """Takes the kernels ``hoisting`` (``hoist.Hoisting``) hoists out of the program: they
        are no tasks, and what depends on them has what they computed from the start."""
        self.hoisting = hoisting
        self.skipped = set(hoisting.written) | set(hoisting.definers)
        self.tasks = self._tasks()

    def set_aside(self, kernels: Sequence[int]) -> List[int]:
        """Takes of ``kernels`` (kernels on weights alone: ``hoist.on_weights_alone``) those
        that follow no kernel but each other out of the planned task graph, to run one after
        another on a stream of their own, ahead of the plan's (option ``weight_stream``,
        ``kernels_plan.plan``); they become the last tasks, one each. Returns them."""
        needs = self.kernel_needs()
        side = set(kernels) - self.skipped
        while True:
            following = {i for i in side if not needs[i] <= side}
            if not following:
                break
            side -= following
        self.side = sorted(side)
        self.tasks = self._tasks()
        return self.side

    def _tasks(self) -> List[Task]:
        """Kernel statements as tasks. A kernel that reads only parameters and buffers (a
        weight's layout, for example) and writes only new storage joins its first reader's
        task: as a task of its own it would be a source independent of everything and maximum
        logical concurrency would give it a stream. Kernels set aside (``side``) come last."""
        side = set(self.side)
        kernels = [s for s in self.statements if s.kind == "kernel" and s.index not in self.skipped and s.index not in side]
        weight_only = set(self.weight_only()) - self.skipped - side
        anchor: Dict[int, int] = {}
        for s in reversed(kernels):
            if s.index not in weight_only:
                continue
            readers = [t for t in kernels if t.index > s.index and (t.reads | t.writes) & s.writes]
            readers = [anchor.get(t.index, t.index) if t.index in weight_only else t.index for t in readers]
            readers = [r for r in readers if r not in weight_only]
            if readers:
                anchor[s.index] = min(readers)
        tasks: List[Task] = []
        self.task_of: Dict[int, int] = {}
        for s in kernels:
            if s.index in anchor:
                continue
            self.task_of[s.index] = len(tasks)
            tasks.append(Task(len(tasks), [s.index], s.name))
        for index, reader in anchor.items():
            task = tasks[self.task_of[reader]]
            task.statements.append(index)
            task.statements.sort()
            self.task_of[index] = task.id
        self.planned = len(tasks)
        for index in self.side:
            self.task_of[index] = len(tasks)
            tasks.append(Task(len(tasks), [index], self.statements[index].name))
        return tasks

    def weight_only(self, static: Optional[Set[int]] = None) -> List[int]:
        """The kernel statements, in order, that compute from parameters and buffers alone: they
        read only the static inputs' storages (or the storages ``static`` where given, even
        none) and what such kernels wrote before, write no input, and every kernel that wrote
        their storages before them is such a kernel too. (A storage both read and written
        counts as written, so the last rule is what keeps out a kernel updating an activation
        in place with only parameters among its other inputs, as Inductor's BatchNorm and ReLU
        after a convolution do: by its accesses alone it reads weights.) The one rule for the
        task graph's anchors (``_tasks``), the weight stream and hoisting (``hoist``)."""
        derived = set(self.static_storages if static is None else static)
        inputs = {st for name in self.inputs for st in self.storage.get(name, ())}
        writers: Dict[int, Set[int]] = {}
        found: List[int] = []
        kept: Set[int] = set()
        for s in self.statements:
            if s.kind != "kernel":
                continue
            earlier = {w for st in s.writes for w in writers.get(st, ())}
            if s.reads and s.reads <= derived and not (s.writes & inputs) and earlier <= kept:
                found.append(s.index)
                kept.add(s.index)
                derived |= s.writes
            for st in s.writes:
                writers.setdefault(st, set()).add(s.index)
        return found

    def task_graph(self) -> dict:
        """The planned tasks (all but those set aside) in the project's JSON schema: ops are
        kernel names, edges the storage and name dependencies between tasks."""
        edges = set()
        kernel_needs = self.kernel_needs()
        for s in self.statements:
            if s.kind != "kernel" or s.index in self.skipped:
                continue
            v = self.task_of[s.index]
            for k in kernel_needs[s.index]:
                u = self.task_of[k]
                if u != v and u < self.planned and v < self.planned:
                    edges.add((u, v))
        nodes = [{"id": t.id, "op": t.name, **({"attrs": {"kernels": len(t.statements)}} if len(t.statements) > 1 else {})} for t in self.tasks[: self.planned]]
        return {"nodes": nodes, "edges": sorted([u, v] for u, v in edges)}

    def kernel_needs(self) -> Dict[int, Set[int]]:
        """For each kernel statement, the kernel statements it must follow (through any
        non-kernel statements between them); hoisted ones (``exclude``) are done before."""
        closure: Dict[int, Set[int]] = {}
        for s in self.statements:
            found: Set[int] = set()
            for j in self.needs[s.index]:
                if j in self.skipped:
                    continue
                if self.statements[j].kind == "kernel":
                    found.add(j)
                else:
                    found |= closure[j]
            closure[s.index] = found
        return {i: v for i, v in closure.items() if self.statements[i].kind == "kernel" and i not in self.skipped}

    def compile_function(self, body: List[ast.stmt], signature: str, label: str, after: Sequence[ast.stmt] = (), **names: Any):
        """``def SIGNATURE:`` over ``body`` (inside Inductor's device guard) and ``after``,
        compiled in a copy of the namespace of Inductor's module with ``names`` added: the
        function and its syntax tree (which shares the statements given, left as they are)."""
        if self.guard is not None:
            guard = copy.copy(self.guard)  # the guard alone: its body is ``body``
            guard.body = body
            body = [guard]
        function = ast.parse(f"def {signature}:\n    pass").body[0]
        function.body = body + list(after)
        tree = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
        namespace = dict(vars(self.module))
        namespace.setdefault("torch", sys.modules["torch"])
        namespace.update(names)
        exec(compile(tree, f"<nimble {label} of {self.module.__name__}>", "exec"), namespace)
        return namespace[function.name], tree

    def written_inputs(self) -> List[int]:
        """The indices of the inputs some kernel writes (through any name sharing their storage)."""
        written: Set[int] = set()
        for s in self.statements:
            if s.kind == "kernel":
                written |= s.writes
        return [i for i, name in enumerate(self.inputs) if self.storage.get(name, set()) & written]

    def storage_of_statement(self, s: Statement) -> Set[int]:
        found: Set[int] = set()
        for name in s.defines:
            found |= self.storage.get(name, set())
        return found
