"""Running compiled regions: in plan order on one stream (CPU, or a graph that cannot be
captured), or on the plan's CUDA streams captured as one CUDA graph per input shape.

In a capture every region is launched on its plan stream: it first waits on the events of the
regions it syncs with, and records its own event at its end if a region waits on it. All side
streams fork from the capturing stream and join back into it, so the capture is one graph.
Every value a region hands to another stays alive until the capture ends, so the caching
allocator never gives its memory to another op while a region on another stream may still
read it (Inductor reuses buffers only inside a region, on its own stream). Graph inputs that
are parameters or buffers are read in place; only the user's inputs are copied into static
buffers before each replay, and those the graph writes in place are copied back after it.
Outputs are the graph's static tensors: the next call overwrites them (as with
``torch.compile(mode="reduce-overhead")``); clone what you keep.
"""

import gc
import weakref
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
import torch.fx

from ..regions import Partition
from ..common.timing import clear_cublas_workspaces

# Every CUDA graph the backend captures allocates from this one pool, whatever the model or the
# shape (graphs are replayed one at a time, in the order the program calls them), except a
# backward's graph that lends its gradients: it has a pool of its own, so that no other graph's
# replay writes the memory a `.grad` now holds (its own next replay is checked for).
_POOL = None
# The graphs alive that were captured into _POOL. PyTorch's allocator lets a capture share a
# pool only while another graph captured into it lives: once every such graph is gone and its
# memory is still held (a graph's output the program kept), a capture into it fails an
# internal assertion, and the failed capture leaves the CUDA generator in capture mode (every
# later random draw fails). So a pool whose graphs are all gone is not used again; its memory
# is freed when its last tensor is.
_POOL_GRAPHS: "weakref.WeakSet" = weakref.WeakSet()
_POOL_USED = False


def shared_pool():
    """The pool the next capture shares with the live graphs (a new one when none lives)."""
    global _POOL, _POOL_USED
    if _POOL_USED:
        # What torch.cuda.graph does before its capture, done before the choice: a dead graph
        # kept by a reference cycle is destroyed now, not between the choice and the capture.
        gc.collect()
    if _POOL is None or (_POOL_USED and not _POOL_GRAPHS):
        _POOL, _POOL_USED = torch.cuda.graph_pool_handle(), False
    return _POOL


def pool_bytes(pool, device) -> int:
    """The bytes the caching allocator holds in graph pool ``pool`` on ``device``: the sizes of
    its segments (what ``torch.cuda.memory_snapshot`` lists for it, as cudagraph trees read
    their pool)."""
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    try:
        segments = torch.cuda.memory_snapshot(mempool_id=pool, include_traces=False)
    except TypeError:  # a torch whose snapshot takes no pool: every segment, filtered below
        segments = torch.cuda.memory_snapshot()
    return sum(s["total_size"] for s in segments if tuple(s["segment_pool_id"]) == tuple(pool) and s["device"] == index)


def _captured_into(pool, graph) -> None:
    """Counts ``graph`` among the shared pool's live graphs when that is where it was captured."""
    global _POOL_USED
    if pool == _POOL:
        _POOL_GRAPHS.add(graph)
        _POOL_USED = True


class Program:
    """A partition whose regions are compiled: ``run(args)`` runs them in issue order on the
    current stream; ``launch(args, streams, events)`` on their plan streams."""

    def __init__(self, gm: torch.fx.GraphModule, partition: Partition, compiled: List[Callable]):
        self.partition = partition
        self.compiled = compiled
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.slot: Dict[torch.fx.Node, int] = {n: i for i, n in enumerate(placeholders)}
        regions = partition.regions
        # A slot for every value a region hands on, after the graph's inputs.
        for region in regions:
            for value in region.outputs:
                self.slot[value] = len(self.slot)
        output_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.output_spec = output_node.args[0]
        self.gm = gm
        self.inputs = [[self.slot[v] for v in r.inputs] for r in regions]
        self.outputs = [[self.slot[v] for v in r.outputs] for r in regions]
        last_use: Dict[int, int] = {}
        for index, slots in enumerate(self.inputs):
            for s in slots:
                last_use[s] = index
        output_slots = set()
        torch.fx.node.map_arg(self.output_spec, lambda n: output_slots.add(self.slot[n]) if n in self.slot else None)
        first_produced = len(placeholders)
        # Slots freed after each region on one stream (never graph inputs or outputs).
        self.free_after: List[List[int]] = [[] for _ in regions]
        for s, index in last_use.items():
            if s >= first_produced and s not in output_slots:
                self.free_after[index].append(s)

    def _values(self, args: Sequence[Any]) -> List[Any]:
        values: List[Any] = [None] * len(self.slot)
        values[: len(args)] = args
        return values

    def _result(self, values: List[Any]):
        def fetch(node: torch.fx.Node):
            if node in self.slot:
                return values[self.slot[node]]
            # A constant the graph returns as is.
            return getattr(self.gm, node.target)

        return torch.fx.node.map_arg(self.output_spec, fetch)

    def run(self, args: Sequence[Any]):
        """Every region in issue order on the current stream, each value freed after its last
        reader."""
        values = self._values(args)
        for index, compiled in enumerate(self.compiled):
            produced = compiled(*[values[s] for s in self.inputs[index]])
            for s, value in zip(self.outputs[index], produced):
                values[s] = value
            for s in self.free_after[index]:
                values[s] = None
        return self._result(values)

    def launch(self, args: Sequence[Any], streams: List[torch.cuda.Stream]):
        """Every region on its plan stream (``streams[k]`` for plan stream ``k``; ``streams[0]``
        is the current stream), with the plan's syncs as events. Keeps every value alive until
        it returns (see the module documentation), then joins every stream into the current one."""
        origin = streams[0]
        fork = torch.cuda.Event()
        fork.record(origin)
        for stream in streams[1:]:
            stream.wait_event(fork)
        values = self._values(args)
        events: Dict[int, torch.cuda.Event] = {}
        for region, compiled in zip(self.partition.regions, self.compiled):
            stream = streams[region.stream]
            with torch.cuda.stream(stream):
                for source in region.waits_on:
                    stream.wait_event(events[source])
                produced = compiled(*[values[s] for s in self.inputs[region.index]])
                for s, value in zip(self.outputs[region.index], produced):
                    values[s] = value
                if region.records:
                    events[region.index] = torch.cuda.Event()
                    events[region.index].record(stream)
        for stream in streams[1:]:
            joined = torch.cuda.Event()
            joined.record(stream)
            origin.wait_event(joined)
        return self._result(values)


def _static_copy(x: torch.Tensor) -> torch.Tensor:
    buffer = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
    buffer.copy_(x)
    return buffer


# The captured training forwards by the address of each output: their backward reads those
# outputs (the values saved for it) in place.
_FORWARD_OUTPUTS: "weakref.WeakValueDictionary[int, CapturedGraph]" = weakref.WeakValueDictionary()


def forward_outputs(args: Sequence[Any]) -> Tuple[List[bool], List["CapturedGraph"]]:
    """Which of a backward's ``args`` are a captured forward's outputs, and those forwards."""
    found, graphs = [], []
    for a in args:
        graph = _FORWARD_OUTPUTS.get(a.data_ptr()) if isinstance(a, torch.Tensor) and a.is_cuda else None
        found.append(graph is not None)
        if graph is not None and all(graph is not g for g in graphs):
            graphs.append(graph)
    return found, graphs


def _use_count(tensor: torch.Tensor, storage: torch.UntypedStorage) -> Tuple[int, int]:
    """Who holds a tensor: references to its TensorImpl (autograd's saved tensors among them)
    and to its storage (aliases: views, ``detach()``, a gradient autograd took over)."""
    return tensor._use_count(), torch._C._storage_Use_Count(storage._cdata)


class StaticInputs:
    """The inputs a captured graph reads in place (parameters, buffers; hundreds of them), and
    whether a call passes tensors at the captured addresses.

    By address, not by identity: ``p.data = other`` keeps the Parameter object and moves its
    memory (Dynamo does not compile again for it), so a graph captured on the old address must
    not replay; and a backward's saved values come as other tensor objects at the addresses
    captured. Checked on every call before the replay starts, so on the call's critical path:
    in C, ``torch._C._tensors_data_ptrs_at_indices_equal``, as PyTorch's cudagraph trees check
    their static inputs (a Python loop over ``data_ptr()`` took half as long again). That still
    costs 0.06-0.08 us a tensor (GoogLeNet's 287 at batch 16: the entry's host time before its
    launch went from 54 to 30 us on an H100's host without it),
    so an inference graph checks after its launch instead, while it runs
    (``CapturedGraph.replay_checked``)."""

    def __init__(self, args: Sequence[Any], positions: Sequence[int]):
        self.positions = list(positions)
        self.addresses = [args[i].data_ptr() for i in self.positions]
        # The captured address at each position read in place (None elsewhere), as the check
        # in C takes them.
        self.address_at: List[Any] = [None] * len(args)
        for i, address in zip(self.positions, self.addresses):
            self.address_at[i] = address

    def match(self, args: Sequence[Any]) -> bool:
        if len(args) != len(self.address_at):
            return False
        try:
            return torch._C._tensors_data_ptrs_at_indices_equal(list(args), self.address_at, self.positions)
        except (AttributeError, TypeError, RuntimeError):
            # Not a tensor where one was captured, or a torch without the check in C.
            for i, address in zip(self.positions, self.addresses):
                a = args[i]
                if not isinstance(a, torch.Tensor) or a.data_ptr() != address:
                    return False
            return True


def _join_forked(capture_stream, side_streams) -> None:
    """After a launch that failed part-way through a capture (an allocation past the device's
    room): the side streams it forked, still capturing, joined back into the capture stream, so
    that the capture ends and the launch's own error is the one raised. Unjoined, ending the
    capture fails instead ("capturing stream has unjoined work") and leaves PyTorch's random
    generators marked as capturing, which breaks every later random op of the process."""
    for side in side_streams:
        try:
            with torch.cuda.stream(side):
                forked = torch.cuda.is_current_stream_capturing()
            if forked:
                capture_stream.wait_stream(side)
        except Exception:  # noqa: BLE001 - the launch's error is the one to raise
            pass


class CapturedGraph:
    """One input shape's CUDA graph of a program: static inputs, the graph, its outputs.

    A training forward's graph is ``pending`` from its replay until its backward's graph has
    read the outputs (or nobody holds them any more): replaying it again before that would
    overwrite the values the backward still needs. A backward's outputs (the gradients) may
    still be held by autograd, which sums the gradients of several backward calls before it
    accumulates them: replaying over them then would be wrong too (``outputs_released``)."""

    pending = False
    consumes: Tuple["CapturedGraph", ...] = ()
    # A backward's gradients handed out as new tensors over the graph's memory (``lent``):
    # autograd then takes them over as ``.grad`` instead of copying each one (it copies a
    # gradient someone else holds). Safe while every ``.grad`` is gone before the next replay
    # (``zero_grad()``'s default); ``outputs_released`` sees one that is not.
    lends_outputs = False

    def __init__(self, program: Program, args: Sequence[Any], static: Sequence[bool], warmups: int, mutated: Sequence[int] = (), pool=None, priority: bool = False):
        device = next(a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda)
        tensor = [isinstance(a, torch.Tensor) for a in args]
        # Per call only the user's inputs are looked at and copied: a model's hundreds of
        # parameters are read in place, checked by identity alone.
        self.copied = [i for i, a in enumerate(args) if tensor[i] and not static[i]]
        self.in_place = [i for i, a in enumerate(args) if tensor[i] and static[i]]
        self.scalars = [(i, a) for i, a in enumerate(args) if not tensor[i]]
        # User inputs the graph writes in place: it writes their static copies, copied back.
        self.written_back = [i for i in self.copied if i in set(mutated)]
        self.mutated_in_place = [i for i in self.in_place if i in set(mutated)]
        self.layout = [(args[i].shape, args[i].stride(), args[i].dtype, args[i].device) for i in self.copied]
        self.inputs = [_static_copy(a) if tensor[i] and not static[i] else a for i, a in enumerate(args)]
        self.static_inputs = StaticInputs(args, self.in_place)
        # With ``priority``, the plan's stream 0 (where nimble-critical puts the heaviest path)
        # runs at the device's highest priority: a kernel node takes the priority of the stream
        # it was captured on, and PyTorch instantiates graphs to honour it.
        high = priority and program.partition.streams > 1
        capture_stream = torch.cuda.Stream(device, priority=torch.cuda.Stream.priority_range()[1] if high else 0)
        streams = [capture_stream] + [torch.cuda.Stream(device) for _ in range(program.partition.streams - 1)]
        # Warm-up on the same streams: Triton's autotuning, cuBLAS handles and workspaces per
        # stream, all before the capture.
        # Kernels hoisted out of the graph (``hoist``) run first, outside it, and again before a
        # replay whose parameters changed; the graph reads their kept values, so it holds them.
        self.prepare = getattr(program, "prepare", None)
        self.hoisted = getattr(program, "prologue", None)
        if self.prepare is not None:
            self.prepare(self.inputs)
        capture_stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(capture_stream):
            for _ in range(warmups):
                program.launch(self.inputs, streams)
        torch.cuda.synchronize(device)
        clear_cublas_workspaces()
        self.graph = torch.cuda.CUDAGraph()
        pool = shared_pool() if pool is None else pool
        # What the capture adds to its pool, the memory the graph holds while it lives, read
        # from the allocator's segments: resetting the process's peak-memory statistics to
        # measure it would clobber the user's own (and any measurement around this one).
        before = pool_bytes(pool, device)
        try:
            with torch.cuda.graph(self.graph, pool=pool, stream=capture_stream):
                try:
                    self.outputs = program.launch(self.inputs, streams)
                except BaseException:
                    _join_forked(capture_stream, streams[1:])
                    raise
        finally:
            clear_cublas_workspaces()
        _captured_into(pool, self)
        torch.cuda.synchronize(device)
        self.peak_bytes = pool_bytes(pool, device) - before
        self.device = device

    def track_outputs(self, forward: bool) -> None:
        """Counts who holds the outputs now (this graph alone), for ``outputs_released``; a
        training forward's outputs are also registered for its backward to read in place."""
        self._flat_outputs = [t for t in torch.utils._pytree.tree_leaves(self.outputs) if isinstance(t, torch.Tensor)]
        # Their storages' Python objects, made once (each is one more reference, counted in the
        # baseline as well).
        self._storages = [t.untyped_storage() for t in self._flat_outputs]
        self._held = [_use_count(t, s) for t, s in zip(self._flat_outputs, self._storages)]
        if forward:
            for t in self._flat_outputs:
                _FORWARD_OUTPUTS[t.data_ptr()] = self

    def outputs_released(self) -> bool:
        """Whether nobody but this graph holds its outputs' memory any more."""
        for t, s, (impl, storage) in zip(self._flat_outputs, self._storages, self._held):
            now_impl, now_storage = _use_count(t, s)
            if now_impl > impl or now_storage > storage:
                return False
        return True

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` can replay this graph: the user's inputs of the captured shapes,
        strides, dtypes and devices, the same scalars, and the parameters and buffers the very
        tensors captured (by identity, else by address)."""
        return self.accepts_user_inputs(args) and self.static_inputs.match(args)

    def accepts_user_inputs(self, args: Sequence[Any]) -> bool:
        """``accepts`` but for the parameters' and buffers' addresses."""
        for i, (shape, stride, dtype, device) in zip(self.copied, self.layout):
            a = args[i]
            if a.shape != shape or a.dtype != dtype or a.stride() != stride or a.device != device:
                return False
        for i, value in self.scalars:
            if args[i] != value:
                return False
        return True

    def __call__(self, args: Sequence[Any]):
        inputs = self.inputs
        if self.prepare is not None:
            self.prepare(args)
        for i in self.copied:
            inputs[i].copy_(args[i])
        self.graph.replay()
        for i in self.written_back:
            args[i].copy_(inputs[i])
        return self.lent() if self.lends_outputs else self.outputs

    # Whether calls replay first and check the parameters' and buffers' addresses while the
    # graph runs (``check_after_launch``).
    checks_after_launch = False

    def check_after_launch(self) -> bool:
        """From now on, where it is safe, a call replays at once and compares the parameters'
        and buffers' addresses with the captured ones while the graph runs (``replay_checked``),
        which takes the check off the call's critical path. A parameter moved since the capture
        (``p.data = other``) is then found after a replay that read its old memory: the captured
        storages are held here, so that memory is still the old parameter's, never freed or
        reused by then; the caller captures again and runs the call again. Safe only where that
        wasted replay changes nothing the caller sees: the graph writes none of the tensors it
        reads in place (a buffer updated in place would be updated twice) and runs no hoisted
        kernels first. Returns whether it is on."""
        if self.prepare is not None or self.lends_outputs or self.mutated_in_place:
            return False
        self._held_storages = [self.inputs[i].untyped_storage() for i in self.in_place]
        self.checks_after_launch = True
        return True

    def replay_checked(self, args: Sequence[Any]):
        """A call that ``accepts_user_inputs``: replayed at once, the addresses compared while the
        graph runs; None, after the device has finished that replay, where they differ."""
        inputs = self.inputs
        for i in self.copied:
            inputs[i].copy_(args[i])
        self.graph.replay()
        if not self.static_inputs.match(args):
            torch.cuda.synchronize(self.device)
            return None
        for i in self.written_back:
            args[i].copy_(inputs[i])
        return self.outputs

    def lent(self):
        """The outputs as new tensors over the same memory, which nobody else holds."""
        outputs = self.outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(t.detach() if isinstance(t, torch.Tensor) else t for t in outputs)
        return torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.detach, outputs)


def shape_key(args: Sequence[Any]) -> Tuple:
    return tuple((tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
