"""The ``torch.compile`` backend ``"nimble"``: the compiler's fused kernels on Nimble's streams.

    model = torch.compile(model, backend="nimble", options={"algorithm": "nimble"})
    model = torch.compile(model, backend=nimble_rs.backend(algorithm="greedy"))  # checked here

``backend`` is the Dynamo backend (also ``nimble_rs.backend``); called with options alone it
returns the backend configured with them, checked at once. ``reports()`` lists what it did for
each graph it compiled. ``watch(watcher)`` and ``watch_calls(watcher)`` let a tool see its
phases (``PHASES``: the compile, Inductor's, the plans, captures, the choice, its timings) and
its calls as they happen, without patching it.
"""

from .common.phases import PHASES, watch, watch_calls
from .options import DEFAULTS
from .options import checked as _checked
from .pipeline import nimble_backend as _nimble_backend
from .pipeline import reports


def backend(*graph_and_inputs, **options):
    """``torch.compile(model, backend=nimble_rs.backend)``: the Dynamo backend itself, called with
    a graph and its example inputs (and ``options={...}`` from ``torch.compile``).

    ``nimble_rs.backend(algorithm="greedy", ...)``: the backend configured with these options
    (``DEFAULTS`` lists them), each checked now: a bad one is a ``NimbleInputError`` raised here,
    not wrapped by Dynamo at the first call. Options ``torch.compile`` passes as well override
    these."""
    if graph_and_inputs:
        return _nimble_backend(*graph_and_inputs, **options)
    _checked(options)

    def configured(gm, example_inputs, options=None, **extra):
        if options is not None and not isinstance(options, dict):
            _checked(options)  # the same error as without configuration
        return _nimble_backend(gm, example_inputs, {**given, **(options or {})}, **extra)

    given = dict(options)
    configured.__name__ = "nimble"
    configured.options = given
    return configured


__all__ = ["backend", "reports", "DEFAULTS", "PHASES", "watch", "watch_calls"]
