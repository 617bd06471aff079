"""How much of the GPU each task of a fused-kernel task graph occupies: its kernels' grids
against the blocks the GPU holds at once, read from the profiler's trace (the same measure as
nimble-torch's ``KernelLaunch::sm_share`` for op-level graphs).

A task gets ``kernels`` (its kernels per call) and ``sm_share`` (the share of the GPU's resident
block slots its kernels' grids fill, weighted by their time; 1 for a wave or more), which the
simulator reads (a graph whose every task has ``kernels`` is simulated with the kernel-timed
calibration, where concurrent kernels share the SMs), and ``launches``: each of its kernels' launch
configuration in one call (grid, block, registers per thread, shared memory, the blocks a
multiprocessor holds at once and the theoretical occupancy they imply, the profiler's estimate of
the achieved occupancy where it gives one, duration and share). A Triton kernel is found by its
name; an extern call by the kernels launched inside the k-th call of its ATen op, as its duration is.
"""

import bisect
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

# Resident blocks per multiprocessor by compute capability (CUDA C++ Programming Guide, the
# technical specifications per compute capability); 32 beyond the table's last entry.
MAX_BLOCKS_PER_SM = {(7, 0): 32, (7, 2): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32}


@dataclass(frozen=True)
class SmLimits:
    """What one multiprocessor holds at once, and how many the GPU has."""

    multiprocessors: int
    max_threads: int
    max_blocks: int
    registers: int
    shared_memory: int

    @staticmethod
    def of_device(device=None) -> "SmLimits":
        p = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
        blocks = MAX_BLOCKS_PER_SM.get((p.major, p.minor), 32 if p.major >= 9 else 16)
        return SmLimits(p.multi_processor_count, p.max_threads_per_multi_processor, blocks, p.regs_per_multiprocessor, p.shared_memory_per_multiprocessor)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def blocks_per_sm(block, registers_per_thread: int, shared_memory: int, limits: SmLimits) -> int:
    """How many blocks of this shape one multiprocessor holds at once (at least one): as many as
    its thread, register, shared-memory and block limits allow."""
    threads = max(1, _product(block))
    per_sm = min(limits.max_blocks, limits.max_threads // threads)
    if registers_per_thread > 0:
        per_sm = min(per_sm, limits.registers // (registers_per_thread * threads))
    if shared_memory > 0:
        per_sm = min(per_sm, limits.shared_memory // shared_memory)
    return max(1, per_sm)


def sm_share(grid, block, registers_per_thread: int, shared_memory: int, limits: SmLimits) -> float:
    """The share of the GPU's block slots a grid fills at once, in (0, 1]: its blocks over how
    many can be resident on the whole GPU (``blocks_per_sm`` on every multiprocessor); 1 for a
    wave or more."""
    blocks = max(1, _product(grid))
    return min(1.0, blocks / (limits.multiprocessors * blocks_per_sm(block, registers_per_thread, shared_memory, limits)))


def launch_configuration(args: dict, duration_us: float, limits: SmLimits) -> dict:
    """One kernel launch as the profiler's trace gives it (its event's ``args``), with what it
    implies on this GPU: blocks per multiprocessor, theoretical occupancy (resident warps over
    the most a multiprocessor holds) and the share of the GPU's block slots."""
    grid, block = [int(d) for d in args.get("grid", [1])], [int(d) for d in args.get("block", [1])]
    registers, shared = int(args.get("registers per thread", 0)), int(args.get("shared memory", 0))
    per_sm = blocks_per_sm(block, registers, shared, limits)
    warps = -(-max(1, _product(block)) // 32)
    launch = {
        "grid": grid,
        "block": block,
        "registers_per_thread": registers,
        "shared_memory_bytes": shared,
        "blocks_per_sm": per_sm,
        "theoretical_occupancy": min(1.0, per_sm * warps / max(1, limits.max_threads // 32)),
        "sm_share": sm_share(grid, block, registers, shared, limits),
        "duration_us": duration_us,
    }
    if "est. achieved occupancy %" in args:
        launch["achieved_occupancy_estimate"] = float(args["est. achieved occupancy %"]) / 100.0
    return launch


def _product(dims) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


Launch = Tuple[float, float, dict]  # a kernel's (duration in µs, sm_share, launch configuration)


def kernel_launches(events: List[dict], limits: SmLimits) -> Tuple[Dict[str, List[Launch]], Dict[str, List[List[Launch]]]]:
    """From a Chrome trace's events: every kernel's (duration, share) by kernel name, and by the
    ATen op whose top-level call launched it, one list per call in call order (a top-level call:
    one inside no other ``aten::`` op on its thread)."""
    by_name: Dict[str, List[Launch]] = {}
    launched_at: Dict[int, Tuple[object, float]] = {}
    calls_by_thread: Dict[object, List[Tuple[float, float, str]]] = {}
    kernels = []
    for e in events:
        category, args = e.get("cat"), e.get("args") or {}
        if category == "kernel":
            configuration = launch_configuration(args, float(e.get("dur", 0.0)), limits)
            launch = (configuration["duration_us"], configuration["sm_share"], configuration)
            by_name.setdefault(e.get("name", ""), []).append(launch)
            kernels.append((args.get("correlation"), launch))
        elif category in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launched_at[args["correlation"]] = (e.get("tid"), float(e.get("ts", 0.0)))
        elif category == "cpu_op" and str(e.get("name", "")).startswith("aten::"):
            calls_by_thread.setdefault(e.get("tid"), []).append((float(e["ts"]), float(e.get("dur", 0.0)), e["name"]))
    # Top-level calls per thread: sorted by start (the longer first on a tie, the enclosing one).
    top: Dict[object, List[Tuple[float, float, int]]] = {}
    order = []
    for tid, calls in calls_by_thread.items():
        open_ends: List[float] = []
        for start, duration, name in sorted(calls, key=lambda c: (c[0], -c[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if not open_ends:
                order.append((start, tid, duration, name))
            open_ends.append(start + duration)
    order.sort(key=lambda c: c[0])
    by_op: Dict[str, List[List[Launch]]] = {}
    lists = []
    for start, tid, duration, name in order:
        launches: List[Launch] = []
        by_op.setdefault(name, []).append(launches)
        top.setdefault(tid, []).append((start, start + duration, len(lists)))
        lists.append(launches)
    starts = {tid: [c[0] for c in calls] for tid, calls in top.items()}
    for correlation, launch in kernels:
        where = launched_at.get(correlation)
        if where is None or where[0] not in top:
            continue
        tid, ts = where
        i = bisect.bisect_right(starts[tid], ts) - 1
        if i >= 0 and ts <= top[tid][i][1]:
            lists[top[tid][i][2]].append(launch)
    return by_name, by_op


def kth_calls(calls: Dict[str, list], op: str, used: Dict[str, int], repeats: int) -> Optional[list]:
    """What ``calls`` (one entry per top-level call of each ATen op, over ``repeats`` calls of
    the program) holds for the next task of ``op``: its call in each repeat, the k-th of that op
    if ``used`` counted k tasks of it before (None: no such call)."""
    entries = calls.get(op, [])
    per_call = len(entries) // repeats if repeats else 0
    k = used.get(op, 0)
    used[op] = k + 1
    if per_call == 0 or k >= per_call:
        return None
    return [entries[r * per_call + k] for r in range(repeats)]


def set_occupancy(graph: dict, events: List[dict], repeats: int, limits: SmLimits) -> Optional[str]:
    """Sets ``kernels``, ``sm_share`` and ``launches`` on every task of ``graph`` from the trace
    ``events`` of ``repeats`` calls (a task whose calls launched no kernel gets ``kernels`` 0, no
    share and no launches); returns why not (and sets nothing) if some task's kernels are not in
    the trace."""
    by_name, by_op = kernel_launches(events, limits)
    used: Dict[str, int] = {}
    found = []
    for node in graph["nodes"]:
        op = node["op"]
        if node["attrs"]["kind"] == "extern":
            calls = kth_calls(by_op, op, used, repeats)
            if calls is None:
                return f"no traced call for {op}"
            launches = [launch for call in calls for launch in call]
            count = round(len(launches) / repeats)
            one_call = list(calls[-1])
        elif op in by_name:
            launches, count = by_name[op], 1
            one_call = launches[-1:]
        else:
            return f"no traced kernel named {op}"
        found.append((node, launches, count, one_call))
    for node, launches, count, one_call in found:
        node["attrs"]["kernels"] = count
        time = sum(d for d, _, _ in launches)
        if launches:
            share = sum(d * s for d, s, _ in launches) / time if time > 0 else max(s for _, s, _ in launches)
            node["attrs"]["sm_share"] = min(1.0, max(share, 1e-6))
            # The last call's (warm, as the timed ones): one configuration per kernel it launched.
            node["attrs"]["launches"] = [configuration for _, _, configuration in one_call]
    return None
