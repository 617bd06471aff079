"""How the backend times things, below every pass and the runtime: CUDA-event samples of a
call and their quartiles, a call's microseconds captured in one CUDA graph behind a wait of the
GPU (``graph_us``, what the rewrites measure their choices with), and cuBLAS's workspaces dropped
after a measurement or a capture."""

import statistics
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

from .phases import in_phase


def clear_cublas_workspaces() -> None:
    """Drops cuBLAS's cached workspaces (one per handle and stream, 32 MiB each on Hopper,
    kept for the process's life). Around a capture: before it, so that the capture allocates
    the workspaces its matmuls use from the graph's pool (freed with the graph) instead of
    baking in ones the warm-up left outside it; after it, so that no eager matmul on those
    streams later computes in the pool's memory. Without this every new side stream's warm-up
    left a workspace allocated for good, after the graph was gone (PyTorch's cudagraph trees
    clear them the same way)."""
    torch._C._cuda_clearCublasWorkspaces()


def time_quartiles_ms(run: Callable[[], Any], repeats: int = 30) -> Tuple[float, float, float]:
    """Lower quartile, median and upper quartile of ``time_samples_ms``."""
    return quartiles(time_samples_ms(run, repeats))


def quartiles(samples: Sequence[float]) -> Tuple[float, float, float]:
    times = sorted(samples)
    return times[len(times) // 4], times[len(times) // 2], times[(3 * len(times)) // 4]


@in_phase("timing")
def time_samples_ms(run: Callable[[], Any], repeats: int = 30) -> List[float]:
    """``repeats`` CUDA-event timings of ``run`` after three untimed calls, each from an idle
    device (synchronized first), so that the host's cost of launching (which grows with a
    graph's streams) counts as it does in a real call."""
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


_MEASURING_STREAMS: Dict[Any, torch.cuda.Stream] = {}


def measuring_stream(device=None) -> "torch.cuda.Stream":
    """The one side stream ``graph_us`` captures on, per device: no new stream (and cuBLAS
    handle state) per measurement. cuBLAS keeps a workspace for each stream it runs on (about
    32 MiB on an H100) until they are cleared: with one stream and no clearing, measurements held
    33.0 MiB after the first and no more after three more (H100, ``677db5d``); ``graph_us`` now
    drops it after each measurement."""
    key = torch.device("cuda") if device is None else torch.device(device)
    if key.index is None:
        key = torch.device("cuda", torch.cuda.current_device())
    if key not in _MEASURING_STREAMS:
        _MEASURING_STREAMS[key] = torch.cuda.Stream(key)
    return _MEASURING_STREAMS[key]


# The GPU's wait before each timed replay, in clock cycles (half a millisecond at 2 GHz): the
# start event and the replay are both queued behind it, so that a pause of this process between
# the two (a core shared with the depthwise kernel's compile workers, which the measurements
# overlap) is not timed as the graph's. Unguarded beside the workers, cuDNN's convolution of
# [16, 84, 42, 42] by 3x3 measured 12.5 us (H200, `1b66f8a`) against 8.0 without them
# (`16d688f`), and a fill of that tensor 11.6 us against 3.7 in the same run.
GUARD_CYCLES = 1_000_000
# (torch's own, as its tests use it; a torch without it times unguarded)
_gpu_sleep = getattr(torch.cuda, "_sleep", None)


def graph_us(run: Callable[[], Any], device=None, repeats: int = 10, samples: int = 5) -> float:
    """Median microseconds of one ``run``, ``repeats`` of them captured in one CUDA graph on
    ``measuring_stream``, each replay timed behind a wait of the GPU (``GUARD_CYCLES``); cuBLAS's
    workspaces dropped after it (``clear_cublas_workspaces``), so that a compile's measurements
    leave none allocated through the rest of its preparation (33 MiB more at peak on an H100,
    measured at ``1aa58cc``)."""
    stream = measuring_stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(repeats):
            run()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if _gpu_sleep is not None:
            _gpu_sleep(GUARD_CYCLES)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / repeats)
    del graph
    clear_cublas_workspaces()
    return statistics.median(times)


def seconds_since(started: float) -> float:
    return time.perf_counter() - started
