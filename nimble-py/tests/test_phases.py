"""Tools watch the backend's phases and calls through ``nimble_rs.dynamo.watch`` and
``watch_calls`` instead of patching its methods: on the CPU a compile tells its phases in nested
start/end pairs, each a named phase of ``PHASES``; a call watcher sees each call; a watcher that
raises is removed with a warning and the compile goes on."""

import warnings

import torch
from torch import nn

import nimble_rs
from models import Inception


def compiled(model, x):
    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(model, backend="nimble")(x)


def test_a_compile_tells_its_phases_in_nested_pairs():
    events = []
    stop = nimble_rs.dynamo.watch(lambda name, moment, detail: events.append((name, moment, detail)))
    try:
        model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
        compiled(model, x)
    finally:
        stop()
    names = [name for name, moment, _ in events if moment == "start"]
    assert {"compile", "inductor", "read", "plan", "program"} <= set(names), names
    assert set(names) <= set(nimble_rs.dynamo.PHASES)
    # Well nested: every end closes the phase opened last.
    open_phases = []
    for name, moment, detail in events:
        if moment == "start":
            open_phases.append((name, detail))
        else:
            assert open_phases.pop() == (name, detail), events
    assert not open_phases
    assert ("compile", "start", "inference") in events and names[0] == "compile"
    # Removed: the next compile tells nothing.
    seen = len(events)
    compiled(Inception(channels=8).eval(), torch.randn(2, 8, 12, 12))
    assert len(events) == seen


def test_a_call_watcher_sees_every_call_with_its_arguments():
    calls = []
    stop = nimble_rs.dynamo.watch_calls(lambda compiled_graph, args: calls.append((type(compiled_graph).__name__, len(args))))
    try:
        model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval(), torch.randn(3, 4)
        torch._dynamo.reset()
        run = torch.compile(model, backend="nimble")
        with torch.no_grad():
            for _ in range(3):
                run(torch.randn(3, 4))
    finally:
        stop()
    assert len(calls) == 3 and calls[0][0] == "NimbleCompiled" and calls[0][1] >= 1, calls


def test_a_watcher_that_raises_is_removed_and_the_compile_goes_on():
    def broken(name, moment, detail):
        raise RuntimeError("the tool's bug")

    nimble_rs.dynamo.watch(broken)
    model, x = Inception(channels=8).eval(), torch.randn(2, 8, 12, 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(model, x)
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5)
    assert any("phase watcher raised RuntimeError: the tool's bug" in str(w.message) for w in caught), [str(w.message) for w in caught]
    from nimble_rs.dynamo.common import phases

    assert broken not in phases._WATCHERS
