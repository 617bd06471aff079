"""Inductor's statements (``wrapper.WrapperProgram``) written again as a plan says: region after
region in the plan's issue order, each kernel on its region's stream, the plan's syncs as
events.

First a schedule (``Schedule.steps``): the statements in order, each kernel or allocation with
its stream, and the fork, waits, records and join between them; ``check()`` proves from it that
every kernel happens after every kernel it depends on. Then code: ``function(streams=True)`` is
``call(args, streams, raw)`` for a CUDA capture (``streams[0]`` the current stream, ``raw``
their handles for Triton's launches); ``function(streams=False)`` is ``call(args)``, the same
order on the current stream (the CPU).

Memory: an allocation is made on the stream of the first kernel that touches its storage, and
the caching allocator gives freed memory back to the stream it was allocated on, to be reused
in that stream's order. A storage touched on one stream only is freed where Inductor frees it.
One touched on several streams (``shared`` counts those) is freed once every kernel that touches
it is known complete on its allocation stream (stream order, events waited, the fork): whatever
that stream allocates next follows them all, so no stream can race on the reused memory; until
then (at worst until the call returns) its ``del`` is deferred. ``kept_to_end`` counts the
storages that no point before the join makes safe. A storage whose disjoint parts kernels on
several streams write (``WrapperProgram`` orders none of those writes) is allocated ahead of
them (``allocated_ahead`` counts those): just after the latest kernel that every one of its
kernels follows (stream order, events, the fork), on that kernel's stream, so that all of them
follow the allocation and the memory is held no earlier than it must be; where no kernel is
followed by all of them, on stream 0 before the fork (``allocated_first`` counts those).
``check()`` proves all three: kernels, frees, and that no kernel touches memory another stream
allocated before it follows that allocation.
"""

import ast
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from . import hoist
from .wrapper import WrapperError, WrapperProgram


class Schedule:
    def __init__(self, program: WrapperProgram, regions: Sequence[dict], syncs: Sequence[Sequence[int]]):
        self.program = program
        self.regions = regions
        self.syncs = [tuple(s) for s in syncs]
        self.order = self._order()
        self.steps = self._steps({})
        # The allocations made ahead, each moved from the fork to its latest safe point.
        self.allocated_ahead = len(self._hoisted)
        anchors = self._anchors()
        if anchors:
            self.steps = self._steps(anchors)

    def _completion(self) -> "_Completion":
        return _Completion(self.program, streams=1 + max((r["stream"] for r in self.regions), default=0))

    def _order(self) -> List[int]:
        """The statements in issue order: each region's kernels in Inductor's order; an
        allocation or a view just before the first statement that needs it; a ``del``, a check
        or a host statement as soon as everything it follows is out."""
        p = self.program
        self.region_of: Dict[int, int] = {}
        kernels: List[int] = []
        for r, region in enumerate(self.regions):
            members = sorted(i for task in region["nodes"] for i in p.tasks[task].statements)
            for i in members:
                self.region_of[i] = r
            kernels.extend(members)
        emitted: List[int] = []
        done: Set[int] = set()
        unmet = [len(n) for n in p.needs]
        dependents: List[List[int]] = [[] for _ in p.statements]
        for i, needs in enumerate(p.needs):
            for j in needs:
                dependents[j].append(i)
        eager = {"del", "check", "host"}
        # Hoisted statements ran before the program: done from the start, never emitted.
        for i in sorted(p.skipped):
            done.add(i)
            for d in dependents[i]:
                unmet[d] -= 1

        def emit(first: int) -> None:
            pending = [first]
            while pending:
                i = pending.pop()
                if i in done:
                    continue
                done.add(i)
                emitted.append(i)
                for d in dependents[i]:
                    unmet[d] -= 1
                    if unmet[d] == 0 and d not in done and p.statements[d].kind in eager:
                        pending.append(d)

        def ensure(i: int) -> None:
            if i in done:
                return
            for j in sorted(p.needs[i]):
                if j not in done:
                    if p.statements[j].kind == "kernel":
                        raise WrapperError(f"the plan issues {p.statements[i].name} before {p.statements[j].name}, which it needs")
                    ensure(j)
            emit(i)

        for i, s in enumerate(p.statements):
            if unmet[i] == 0 and s.kind in eager:
                emit(i)
        for i in kernels:
            ensure(i)
        for i in range(len(p.statements)):
            ensure(i)
        return emitted

    def _anchors(self) -> Dict[int, int]:
        """Per allocation made ahead (``self._hoisted``, before the fork in ``self.steps``), the
        latest kernel that every kernel touching its storage follows, where there is one: the
        allocation made just after it, on its stream, is followed by them all too (whatever
        carries that kernel to another stream, an event or the join, comes later)."""
        p = self.program
        users = {a: set().union(*(self._users.get(st, set()) for st in p.storage_of_statement(p.statements[a]))) for a in self._hoisted}
        followed: Dict[int, Optional[Set[int]]] = {a: None for a in self._hoisted}
        position: Dict[int, int] = {}
        known = self._completion()
        for n, step in enumerate(self.steps):
            if step[0] == "stmt" and step[2] is not None and p.statements[step[1]].kind == "kernel":
                position[step[1]] = n
                for a in self._hoisted:
                    if step[1] in users[a]:
                        before = {j for j in known.before[step[2]] if p.statements[j].kind == "kernel"}
                        followed[a] = before if followed[a] is None else followed[a] & before
            known.step(step)
        return {a: max(common, key=position.__getitem__) for a, common in followed.items() if common}

    def _steps(self, anchors: Dict[int, int]) -> List[Tuple]:
        """("fork",), ("stmt", i, stream or None), ("del", i, kept names), ("wait", stream,
        region), ("record", region, stream), ("join",). ``anchors``: allocations made ahead that
        follow a kernel instead of preceding the fork (``_anchors``)."""
        p = self.program
        stream_of = {i: self.regions[r]["stream"] for i, r in self.region_of.items()}
        waits: Dict[int, List[int]] = {}
        records: Set[int] = set()
        for a, b in self.syncs:
            waits.setdefault(b, []).append(a)
            records.add(a)
        first_stream: Dict[int, int] = {}
        for i in self.order:
            s = p.statements[i]
            if s.kind == "kernel":
                for st in s.reads | s.writes:
                    first_stream.setdefault(st, stream_of[i])
        for i in self.order:
            s = p.statements[i]
            if s.kind == "alloc":
                storages = p.storage_of_statement(s)
                stream_of[i] = min((first_stream[st] for st in storages if st in first_stream), default=0)
        users, allocated_on = _users_and_allocation_streams(p, self.order, stream_of)
        hoisted = _allocated_first(p, users, stream_of)
        self._hoisted, self._users = hoisted, users
        after: Dict[int, List[int]] = {}
        for i in hoisted:
            if i in anchors:
                after.setdefault(anchors[i], []).append(i)
            stream_of[i] = stream_of[anchors[i]] if i in anchors else 0
            for st in p.storage_of_statement(p.statements[i]):
                allocated_on[st] = stream_of[i]
        shared = _shared(users, allocated_on, stream_of)
        self.shared = len(shared)
        self.allocated_first = len([i for i in hoisted if i not in anchors])
        last_of_region: Dict[int, int] = {}
        for i in self.order:
            if i in self.region_of:
                last_of_region[self.region_of[i]] = i
        steps: List[Tuple] = []
        # What each stream's next op is known to follow, for the deferred frees of shared
        # storages; `deferred` holds (del statement, its names, their shared storages).
        known = self._completion()
        deferred: List[Tuple[int, List[str], Set[int]]] = []

        def release() -> None:
            for entry in list(deferred):
                if all(users.get(st, set()) <= known.before[allocated_on[st]] for st in entry[2]):
                    deferred.remove(entry)
                    steps.append(("del", entry[0], entry[1]))

        def add(step: Tuple) -> None:
            steps.append(step)
            known.step(step)
            if deferred and step[0] in ("stmt", "wait", "fork"):
                release()

        for i in hoisted:
            if i not in anchors:
                add(("stmt", i, 0))
        add(("fork",))
        started: Set[int] = set()
        for i in self.order:
            s = p.statements[i]
            if i in hoisted:
                continue
            if s.kind == "del":
                names = [t.id for t in s.node.targets if isinstance(t, ast.Name)]
                kept = [n for n in names if not (p.storage.get(n, set()) & shared)]
                if kept:
                    add(("del", i, kept))
                later = [n for n in names if n not in kept]
                if later:
                    deferred.append((i, later, {st for n in later for st in p.storage.get(n, set()) & shared if st in allocated_on}))
                    release()
                continue
            if s.kind not in ("kernel", "alloc"):
                add(("stmt", i, None))
                continue
            region = self.region_of.get(i)
            if region is not None and region not in started:
                started.add(region)
                for source in sorted(waits.get(region, [])):
                    add(("wait", stream_of[i], source))
            add(("stmt", i, stream_of[i]))
            for a in after.get(i, ()):
                add(("stmt", a, stream_of[a]))
            if region is not None and last_of_region[region] == i and region in records:
                add(("record", region, stream_of[i]))
        self.kept_to_end = len({st for entry in deferred for st in entry[2]})
        steps.append(("join",))
        return steps

    def check(self) -> None:
        """Raises ``WrapperError`` unless every kernel is issued after, and happens after, every
        kernel it depends on, and every ``del`` of a storage touched on several streams comes
        once every kernel touching it is known complete on the stream that allocated it: the
        steps replayed with, per stream, the kernels known complete before its next op (stream
        order, events recorded and waited, fork and join)."""
        p = self.program
        needs = p.kernel_needs()
        known = self._completion()
        stream_of = {step[1]: step[2] for step in self.steps if step[0] == "stmt" and step[2] is not None}
        users, allocated_on = _users_and_allocation_streams(p, [i for i in self.order if i in stream_of], stream_of)
        shared = _shared(users, allocated_on, stream_of)
        allocated: Dict[int, Tuple[int, int]] = {}  # storage: (its allocation, the stream)
        for step in self.steps:
            if step[0] == "stmt" and step[2] is not None and p.statements[step[1]].kind == "alloc":
                for st in p.storage_of_statement(p.statements[step[1]]):
                    allocated[st] = (step[1], step[2])
            if step[0] == "stmt" and step[2] is not None and p.statements[step[1]].kind == "kernel":
                i, k = step[1], step[2]
                missing = needs[i] - known.before[k]
                if missing:
                    j = min(missing)
                    raise WrapperError(f"{p.statements[i].name} (statement {i}) on stream {k} may run before {p.statements[j].name} (statement {j})")
                for st in sorted(p.statements[i].reads | p.statements[i].writes):
                    a, j = allocated.get(st, (None, k))
                    if j != k and a not in known.before[k]:
                        # Memory from stream j's pool is free for j's next ops only.
                        raise WrapperError(f"{p.statements[i].name} (statement {i}) on stream {k} may touch memory stream {j} allocated (statement {a}) before its earlier users are done")
            elif step[0] == "wait" and step[2] not in known.events:
                raise WrapperError(f"stream {step[1]} waits on region {step[2]}'s event before it is recorded")
            elif step[0] == "del":
                for name in step[2]:
                    for st in p.storage.get(name, set()):
                        if st in shared and st in allocated_on:
                            early = users[st] - known.before[allocated_on[st]]
                            if early:
                                j = min(early)
                                raise WrapperError(f"del {name} (statement {step[1]}) frees memory stream {allocated_on[st]} may reuse while {p.statements[j].name} (statement {j}) may still touch it")
            known.step(step)


    def function(self, streams: bool, cache: Optional[Dict[str, Any]] = None):
        """The plan's ``call`` (see the module's documentation), compiled in a copy of the
        namespace of Inductor's module; ``self.source`` is its code. Where the program's
        kernels on weights alone are hoisted (``WrapperProgram.exclude``), it starts by
        binding the names they wrote to the values ``cache`` keeps."""
        p = self.program
        body: List[ast.stmt] = hoist.bindings(p.hoisting) if p.hoisting is not None else []
        for step in self.steps:
            kind = step[0]
            if kind == "stmt":
                # Inductor's statement itself (compiling a tree changes none of its nodes), on
                # its stream a new one where it names the raw stream.
                node = p.statements[step[1]].node
                if streams and step[2] is not None:
                    block = _parsed(f"with torch.cuda.stream(_nimble_streams[{step[2]}]):\n    pass")[0]
                    block.body = [_on_raw_stream(node, p.stream_variables, step[2])]
                    node = block
                body.append(node)
            elif kind == "del":
                body.append(ast.Delete(targets=[ast.Name(id=n, ctx=ast.Del()) for n in step[2]]))
            elif not streams:
                continue
            elif kind == "fork":
                body += _parsed("_nimble_events = {}\n_nimble_fork = torch.cuda.Event()\n_nimble_fork.record(_nimble_streams[0])\nfor _s in _nimble_streams[1:]:\n    _s.wait_event(_nimble_fork)")
            elif kind == "wait":
                body += _parsed(f"_nimble_streams[{step[1]}].wait_event(_nimble_events[{step[2]}])")
            elif kind == "record":
                body += _parsed(f"_nimble_events[{step[1]}] = torch.cuda.Event()\n_nimble_events[{step[1]}].record(_nimble_streams[{step[2]}])")
            elif kind == "join":
                body += _parsed("for _s in _nimble_streams[1:]:\n    _nimble_streams[0].wait_stream(_s)")
        arguments = "args, _nimble_streams, _nimble_raw" if streams else "args"
        function, self._tree = p.compile_function(body, f"nimble_call({arguments})", "plan", after=[p.returned], _nimble_cache=cache)
        return function

    @property
    def source(self) -> str:
        """The code of the function ``function`` compiled last."""
        return ast.unparse(self._tree)


class _Completion:
    """The kernels known complete before each stream's next op, as a schedule's steps are
    issued: stream order, events recorded and waited, the fork and the join."""

    def __init__(self, program: WrapperProgram, streams: int):
        self.program = program
        self.streams = streams
        self.before: List[Set[int]] = [set() for _ in range(streams)]
        self.events: Dict[int, Set[int]] = {}

    def step(self, step: Tuple) -> None:
        kind = step[0]
        if kind == "stmt" and step[2] is not None and self.program.statements[step[1]].kind in ("kernel", "alloc"):
            self.before[step[2]].add(step[1])
        elif kind == "record":
            self.events[step[1]] = set(self.before[step[2]])
        elif kind == "wait" and step[2] in self.events:
            self.before[step[1]] |= self.events[step[2]]
        elif kind == "fork":
            for k in range(1, self.streams):
                self.before[k] |= self.before[0]
        elif kind == "join":
            for k in range(1, self.streams):
                self.before[0] |= self.before[k]


def _allocated_first(program: WrapperProgram, users: Dict[int, Set[int]], stream_of: Dict[int, int]) -> List[int]:
    """The allocations to make ahead of their kernels: those of storages whose parts kernels on
    different streams write (``WrapperProgram`` orders no two writes of disjoint parts;
    ``users``: per storage the kernels touching it). Memory allocated on a stream is free for
    that stream's next ops, which the first part's writer would be, but not for another
    stream's: each is made where all of them follow it (before the fork, every stream does)."""
    parted = {st for kernels in users.values() for i in kernels for st in program.statements[i].parts}
    found = set()
    for st in parted:
        a = program.allocation.get(st)
        if a is not None and len({stream_of[i] for i in users[st]}) > 1 and not program.needs[a]:
            found.add(a)
    return sorted(found)


def _users_and_allocation_streams(program: WrapperProgram, order: Sequence[int], stream_of: Dict[int, int]):
    """Per storage the kernel statements that touch it, and the stream its memory is allocated
    on: that of its allocation, or of the kernel that returns it new (storages the program does
    not allocate, its inputs, have none)."""
    users: Dict[int, Set[int]] = {}
    allocated_on: Dict[int, int] = {}
    inputs = {st for name in program.inputs for st in program.storage.get(name, ())}
    for i in order:
        s = program.statements[i]
        if s.kind == "kernel":
            for st in s.reads | s.writes:
                users.setdefault(st, set()).add(i)
        if s.kind in ("alloc", "kernel") and i in stream_of:
            created = program.storage_of_statement(s) if s.kind == "alloc" else s.writes - s.reads
            for st in created - inputs:
                allocated_on.setdefault(st, stream_of[i])
    return users, allocated_on


def _shared(users: Dict[int, Set[int]], allocated_on: Dict[int, int], stream_of: Dict[int, int]) -> Set[int]:
    """The storages touched on more than one stream (their kernels' and their allocation's)."""
    shared = set()
    for st, kernels in users.items():
        streams = {stream_of[i] for i in kernels}
        if st in allocated_on:
            streams.add(allocated_on[st])
        if len(streams) > 1:
            shared.add(st)
    return shared


def _parsed(text: str) -> List[ast.stmt]:
    return ast.parse(text).body


def _on_raw_stream(node: Any, variables: Set[str], stream: int) -> Any:
    """``node`` with the raw stream Inductor got (``stream=stream0`` in Triton launches) read as
    the plan's stream's handle, ``_nimble_raw[stream]``: new nodes on the paths to those names,
    the rest of the tree shared with ``node``, which is left as it is."""
    if isinstance(node, list):
        new = [_on_raw_stream(n, variables, stream) for n in node]
        return node if all(a is b for a, b in zip(new, node)) else new
    if not isinstance(node, ast.AST):
        return node
    if isinstance(node, ast.Name) and node.id in variables and isinstance(node.ctx, ast.Load):
        return ast.Subscript(value=ast.Name(id="_nimble_raw", ctx=ast.Load()), slice=ast.Constant(stream), ctx=ast.Load())
    fields = {name: _on_raw_stream(value, variables, stream) for name, value in ast.iter_fields(node)}
    if all(fields[name] is value for name, value in ast.iter_fields(node)):
        return node
    changed = type(node)(**fields)
    return ast.copy_location(changed, node)
