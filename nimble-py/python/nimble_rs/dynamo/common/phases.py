"""The backend's phases, for tools that watch where its time and memory go without patching it.

``watch(watcher)`` adds ``watcher(phase, moment, detail)``, called with ``moment`` "start" and
then "end" around each phase the backend runs (phases nest: a capture holds the choice, which
holds captures and timings), ``detail`` the graph's kind ("inference", "forward", "backward")
where the phase knows it, else None; it returns a function that removes the watcher. A watcher
that raises is removed and the error announced once; the backend goes on. ``watch_calls(watcher)``
adds ``watcher(compiled, args)``, called at every call of a compiled graph before it runs (the
backend's callable and the flat arguments Dynamo passes it), for tools that time its parts.

With no watcher a phase costs one check of a list. ``PHASES`` names every phase and what it
covers; a phase not in it is never reported.
"""

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional

from .announce import warn_once

PHASES: Dict[str, str] = {
    "compile": "the backend's inner compile of one graph: Inductor, the passes, reading, the plans",
    "inductor": "Inductor's compile of the graph (compile_fx_inner)",
    "read": "reading Inductor's program back (the wrapper's statements and storages)",
    "separate": "the buffers of weight copies set apart (options weight_stream, separate_weight_buffers)",
    "plan": "one plan: the Rust registry's algorithm and the checker",
    "program": "one plan's program: regions, emitted code, its proof",
    "critical path": "the critical-path plan and its program (option time_critical_path)",
    "capture": "a new input shape's capture, with the choice on the first",
    "captured": "one program captured: warm-ups and torch.cuda.graph",
    "choice": "the choice: eager's references, each program captured, timed and checked",
    "timing": "one program's timings (CUDA events)",
    "depthwise ahead": "option depthwise_kernels: its variants' compile workers started",
    "depthwise baseline": "option depthwise_kernels: cuDNN's convolution and its writes measured at a site",
    "depthwise timing": "option depthwise_kernels: one site's variants measured",
}

Watcher = Callable[[str, str, Optional[str]], Any]
_WATCHERS: List[Watcher] = []
# (Read by the compiled graph's call itself, which checks it before anything else: the hot path.)
CALL_WATCHERS: List[Callable[[Any, tuple], Any]] = []


def _removal(watchers: list, watcher) -> Callable[[], None]:
    def remove() -> None:
        if watcher in watchers:
            watchers.remove(watcher)

    return remove


def watch(watcher: Watcher) -> Callable[[], None]:
    """Adds ``watcher`` (see the module's documentation); returns the function that removes it."""
    _WATCHERS.append(watcher)
    return _removal(_WATCHERS, watcher)


def watch_calls(watcher: Callable[[Any, tuple], Any]) -> Callable[[], None]:
    """Adds ``watcher(compiled, args)`` for every call of a compiled graph; returns its removal."""
    CALL_WATCHERS.append(watcher)
    return _removal(CALL_WATCHERS, watcher)


def _tell(watchers: list, *event) -> None:
    for watcher in list(watchers):
        try:
            watcher(*event)
        except Exception as error:  # noqa: BLE001 - a tool's bug must not stop the compile
            if watcher in watchers:
                watchers.remove(watcher)
            warn_once(("watcher", type(error).__name__), f"nimble backend: a phase watcher raised {type(error).__name__}: {error}; it was removed")


@contextlib.contextmanager
def phase(name: str, detail: Optional[str] = None):
    """Phase ``name`` (a key of ``PHASES``) around the block, told to every watcher."""
    if not _WATCHERS:
        yield
        return
    assert name in PHASES, name
    _tell(_WATCHERS, name, "start", detail)
    try:
        yield
    finally:
        _tell(_WATCHERS, name, "end", detail)


def in_phase(name: str, detail: Optional[Callable[..., Optional[str]]] = None):
    """A decorator: the function's calls are phase ``name``, its detail ``detail(*args, **kwargs)``
    (for a method, ``lambda self, *a, **k: self.kind``)."""
    assert name in PHASES, name

    def decorate(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            if not _WATCHERS:
                return function(*args, **kwargs)
            with phase(name, detail(*args, **kwargs) if detail is not None else None):
                return function(*args, **kwargs)

        return run

    return decorate


def called(compiled: Any, args: tuple) -> None:
    """A compiled graph's call, told to every call watcher (callers check ``CALL_WATCHERS``
    first, so that a call with none costs a list's truth test)."""
    _tell(CALL_WATCHERS, compiled, args)
