"""Runs a script of Triton kernels on the CPU, in Triton's interpreter, for the kernel tests
(``test_depthwise_kernels.py``, ``test_separable_kernels.py``, ``test_backend_depthwise.py``): in a process of its own, since
the interpreter is chosen before Triton is first imported, with ``experiments/python/probes``
(where the probes' kernels live) on its path."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "python" / "probes"


def interpreted(script: str, cases, path: str = str(EXPERIMENTS)) -> list:
    """The JSON list ``script`` prints last, given ``cases`` as JSON in ``sys.argv[1]``, with
    ``path`` (by default the probes' directory) first on its module path."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([path, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
