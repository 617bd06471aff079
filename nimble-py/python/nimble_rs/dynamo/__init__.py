"""The ``torch.compile`` backend ``"nimble"``: the compiler's fused kernels on Nimble's streams.

    model = torch.compile(model, backend="nimble", options={"algorithm": "nimble"})

``backend`` is the Dynamo backend (also ``nimble_rs.backend``); ``reports()`` lists what it did
for each graph it compiled.
"""

from .options import DEFAULTS
from .pipeline import nimble_backend as backend, reports

__all__ = ["backend", "reports", "DEFAULTS"]
