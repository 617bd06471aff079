"""How option ``fuse_convolutions="epilogue"`` picks cuDNN's plan for a shape
(``nimble_rs.dynamo.passes.epilogue.tune``), on the CPU: cuDNN's graph stood in for by plans of given
times and errors (the op's GPU runs are test_backend_gpu_fold.py's). The fastest plan whose output
is exact is kept where it beats the convolution and a pointwise pass; plans are built in cuDNN's
order until one is as fast as the convolution alone."""

import pytest
import torch

from nimble_rs.dynamo.passes import epilogue


class Plans:
    """cuDNN's ranked plans as (microseconds, relative error) each; what was built and run."""

    def __init__(self, plans, alone, unfused):
        self.plans, self.alone, self.unfused = plans, alone, unfused
        self.built, self.last = [], None

    # The graph's side.
    def build_plan_at_index(self, plan):
        self.built.append(plan)

    def get_workspace_size_plan_at_index(self, plan):
        return 0

    # Fused.run: the unfused arithmetic, off by the plan's error.
    def run(self, fused, x, weight, scale, bias, plan=None):
        plan = fused.plan if plan is None else plan
        self.last = plan
        out = epilogue.reference(x, weight, scale, bias, *fused.geometry)
        return out * (1 + self.plans[plan][1])

    # The timer: the convolution alone, then with a pointwise pass, then the plans as run.
    def timer(self):
        calls = []

        def time_of(run):
            run()
            calls.append(None)
            if len(calls) == 1:
                return self.alone
            if len(calls) == 2:
                return self.unfused
            return self.plans[self.last][0]

        return time_of


@pytest.fixture
def plans(monkeypatch):
    def make(table, alone=5.0, unfused=9.0):
        made = Plans(table, alone, unfused)
        monkeypatch.setattr(epilogue, "_build", lambda x, w, s, b, stride, padding, dilation: epilogue.Fused(made, (), None, list(range(len(table))), (tuple(stride), tuple(padding), tuple(dilation))))
        monkeypatch.setattr(epilogue.Fused, "run", lambda fused, *args, **kwargs: made.run(fused, *args, **kwargs))
        return made

    epilogue._TUNED.clear()
    yield make
    epilogue._TUNED.clear()


def tuned(made):
    shape = dict(x_shape=(2, 4, 6, 6), x_stride=(144, 1, 24, 4), w_shape=(8, 4, 3, 3), w_stride=(36, 1, 12, 4))
    return epilogue.tune(*shape.values(), torch.float32, torch.device("cpu"), (1, 1), (1, 1), (1, 1), made.timer())


def test_the_fastest_exact_plan_is_kept(plans):
    # Plan 1 is the fastest but off by 1e-3 (another TF32 rounding): plan 2 is kept.
    made = plans([(10.0, 0.0), (6.0, 1e-3), (8.0, 0.0)])
    fused = tuned(made)
    assert fused.plan == 2 and fused.why == "", fused
    assert made.built == [0, 1, 2] and fused.times["difference"] < epilogue.EXACT


def test_a_plan_as_fast_as_the_convolution_alone_ends_the_search(plans):
    made = plans([(7.0, 0.0), (5.05, 0.0), (3.0, 0.0)], alone=5.0)
    fused = tuned(made)
    assert made.built == [0, 1] and fused.plan == 1, (made.built, fused)


def test_plans_all_inexact_or_slower_than_unfused_are_not_kept(plans):
    fused = tuned(plans([(6.0, 1e-3), (7.0, 2e-4)]))
    assert fused.plan is None and "differs from the unfused arithmetic by 1.0e-03" in fused.why, fused.why
    epilogue._TUNED.clear()  # (the same shape again, other plans)
    fused = tuned(plans([(9.5, 0.0), (12.0, 0.0)], unfused=9.0))
    assert fused.plan is None and fused.why.startswith("slower: 9.5 us fused against 9.0 us"), fused.why


def test_a_shape_is_tuned_once(plans):
    made = plans([(6.0, 0.0)])
    first = tuned(made)
    assert tuned(made) is first and made.built == [0]
