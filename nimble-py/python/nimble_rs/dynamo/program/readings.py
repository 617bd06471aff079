"""The two readings of one compiled graph side by side: the text reader's (``wrapper``: the
statements of Inductor's ``call``, their storages) and the scheduler's (``scheduler_graph``: its
nodes after fusion, their buffers).

``compare`` pairs each kernel the text launches with the scheduler node it came from (in order,
each pair checked by the buffers both name) and compares the orders the two readings put between
kernels. An order the scheduler has and the text reader lacks would be a dependency the backend
misses: a wrong plan. An order only the text reader has is named with its reason where it has
one: Inductor's memory planning let one buffer's memory hold a later one (``memory reuse``),
which the text's program must respect and the scheduler's buffers do not yet show.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from . import scheduler_graph
from .scheduler_graph import SchedulerReading
from .wrapper import WrapperProgram


@dataclass
class Comparison:
    """``pairs``: (text statement, scheduler node) for every kernel; ``unpaired`` says why not
    (then nothing else is compared). ``missing``: (statement, statement) orders only the
    scheduler has. ``extra``: (statement, statement, why) orders only the text reader has, why
    None where no reason is known."""

    pairs: List[Tuple[int, int]] = field(default_factory=list)
    unpaired: Optional[str] = None
    missing: List[Tuple[int, int]] = field(default_factory=list)
    extra: List[Tuple[int, int, Optional[str]]] = field(default_factory=list)

    @property
    def unexplained(self) -> List[Tuple[int, int]]:
        return [(u, v) for u, v, why in self.extra if why is None]

    def differences(self) -> List[str]:
        """Each difference, one line each, with its reason."""
        if self.unpaired is not None:
            return [f"kernels not paired: {self.unpaired}"]
        lines = [f"statement {v} after {u}: only the scheduler orders them" for u, v in self.missing]
        lines += [f"statement {v} after {u}: only the text orders them ({why or 'no reason known'})" for u, v, why in self.extra]
        return lines


def _names(reading: SchedulerReading, node) -> Set[str]:
    """The buffers a node writes, by their own and their real names."""
    own = set(node.get_buffer_names())
    return own | {reading.real(n) for n in own} | scheduler_graph.accesses(reading, node)[1]


def _writes(wrapper: WrapperProgram, reading: SchedulerReading, statement, node, following) -> bool:
    """Whether the kernel ``statement`` writes what ``node`` writes: a storage of a buffer of
    ``node`` that it names, or that it writes under another name (a buffer Inductor computed in
    place of another inside one kernel) while the ``following`` kernel statement does not name
    the node's buffers."""
    names = _names(reading, node)
    written = {name for name in names if wrapper.storage.get(name, set()) & statement.writes}
    if written & (statement.uses | set(statement.defines)):
        return True
    return bool(written) and (following is None or not names & (following.uses | set(following.defines)))


def _inside(wrapper: WrapperProgram, reading: SchedulerReading, node) -> bool:
    """Whether the text names none of the buffers ``node`` writes: they live inside a kernel."""
    return not any(name in wrapper.storage for name in _names(reading, node))


def _reach(successors: Dict[int, Set[int]], order: List[int]) -> Dict[int, Set[int]]:
    """What each statement reaches (``order``: every statement, edges going forward in it)."""
    closure: Dict[int, Set[int]] = {}
    for u in reversed(order):
        closure[u] = set(successors.get(u, ()))
        for v in successors.get(u, ()):
            closure[u] |= closure.get(v, set())
    return closure


def compare(wrapper: WrapperProgram, reading: SchedulerReading) -> Comparison:
    """The two readings of one graph compared (``Comparison``)."""
    result = Comparison()
    texts = [s for s in wrapper.statements if s.kind == "kernel"]
    nodes = reading.nodes
    kinds = [scheduler_graph.kind(n) for n in nodes]
    launches = [i for i, k in enumerate(kinds) if k != "view"]
    # In order: each kernel statement takes the next node and the nodes after it that it too
    # names and writes (Inductor's C++ backend generates consecutive nodes as one kernel), with
    # the nodes before them whose buffers the text never names (kept inside that kernel).
    j = 0
    for k, s in enumerate(texts):
        following = texts[k + 1] if k + 1 < len(texts) else None
        inside: List[int] = []
        while True:
            while j < len(launches) and _inside(wrapper, reading, nodes[launches[j]]):
                inside.append(launches[j])
                j += 1
            if j < len(launches) and _writes(wrapper, reading, s, nodes[launches[j]], following):
                result.pairs.extend((s.index, i) for i in inside + [launches[j]])
                inside = []
                j += 1
            elif result.pairs and result.pairs[-1][0] == s.index:
                j -= len(inside)  # the next statement's
                break
            else:
                after = f"scheduler node {nodes[launches[j]].get_name()}" if j < len(launches) else "no scheduler node left"
                result.unpaired = f"statement {s.index} ({s.name}) writes no buffer of {after}"
                return result
    if j < len(launches):
        result.unpaired = f"scheduler nodes from {nodes[launches[j]].get_name()} on ({len(launches) - j}) launch no kernel of the text"
        return result
    statement_of = {i: s for s, i in result.pairs}

    scheduled: Dict[int, Set[int]] = {s.index: set() for s in texts}
    for i, before in enumerate(scheduler_graph.dependencies(reading, nodes, kinds)):
        if i in statement_of:
            for p in before:
                if statement_of[p] != statement_of[i]:
                    scheduled[statement_of[p]].add(statement_of[i])
    text: Dict[int, Set[int]] = {s.index: set() for s in texts}
    for v, before in wrapper.kernel_needs().items():
        for u in before:
            text[u].add(v)
    order = [s.index for s in texts]
    text_reach, scheduled_reach = _reach(text, order), _reach(scheduled, order)
    result.missing = sorted((u, v) for u, vs in scheduled.items() for v in vs if v not in text_reach[u])
    buffers = {n for node in nodes for n in _names(reading, node)}
    for u, vs in sorted(text.items()):
        for v in sorted(vs):
            if v not in scheduled_reach[u]:
                result.extra.append((u, v, _why(wrapper, reading, buffers, u, v)))
    return result


def _why(wrapper: WrapperProgram, reading: SchedulerReading, buffers: Set[str], u: int, v: int) -> Optional[str]:
    """Why the text orders statement ``v`` after ``u`` where the scheduler does not: a storage
    both touch holds two of the graph's buffers (Inductor reused one's memory for the other)."""
    a, b = wrapper.statements[u], wrapper.statements[v]
    shared = (a.reads | a.writes) & (b.reads | b.writes)
    for storage in sorted(shared):
        held = sorted({reading.real(name) for name, storages in wrapper.storage.items() if storage in storages and name in buffers})
        if len(held) >= 2:
            return f"memory reuse: one storage holds {', '.join(held)}"
    return None
