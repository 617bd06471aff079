"""Nimble's exceptions. Every error the Rust side raises is one of these, with its message."""


class NimbleError(RuntimeError):
    """Something went wrong tracing, preparing or running a model, or scheduling a graph."""


class NimbleInputError(NimbleError, ValueError):
    """Bad input: wrong number, shape or dtype of inputs, an unknown algorithm, a malformed graph."""


class HostSyncError(NimbleError):
    """The forward makes the host wait for the GPU (``.item()``, ``nonzero``, a copy to the CPU),
    which no CUDA graph can capture."""


class DynamicModelError(NimbleError):
    """The forward issued different ops on a later run: its control flow depends on the data."""


class NoCudaError(NimbleError):
    """``prepare`` needs a CUDA device and torch sees none."""


class NotPreparedError(NimbleError):
    """The model was called before ``prepare``."""


class InductorDriftWarning(RuntimeWarning):
    """Inductor's output holds something the backend does not understand (a statement a newer
    torch writes): that graph runs as Inductor compiled it, on one stream. Said once per kind of
    statement; ``warnings.simplefilter("error", InductorDriftWarning)`` makes it an error."""
