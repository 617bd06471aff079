"""The torch the libtorch engine (`nimble_rs_engine`, behind `nimble_rs.Nimble`) was built for:
it links the torch of the Python it runs in, so any other version would mix two libtorch ABIs.
The scheduling extension and the torch.compile backend need no particular version."""

REQUIRED_TORCH = "2.11.0"


def check_torch_version(found: str) -> None:
    """Raises ImportError unless ``found`` (``torch.__version__``) is REQUIRED_TORCH (any local
    build suffix, such as ``+cu130``, is allowed)."""
    if found.split("+")[0] != REQUIRED_TORCH:
        raise ImportError(
            f"nimble_rs.Nimble's engine was built for torch {REQUIRED_TORCH}, but this Python has torch {found}; "
            f"install torch=={REQUIRED_TORCH} (or rebuild nimble-rs-engine against torch {found}); "
            f"torch.compile(model, backend=\"nimble\") works with this torch"
        )
