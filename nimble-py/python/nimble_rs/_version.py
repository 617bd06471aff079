"""The torch this package was built for: the extension links the torch of the Python it runs in,
so any other version would mix two libtorch ABIs."""

REQUIRED_TORCH = "2.11.0"


def check_torch_version(found: str) -> None:
    """Raises ImportError unless ``found`` (``torch.__version__``) is REQUIRED_TORCH (any local
    build suffix, such as ``+cu130``, is allowed)."""
    if found.split("+")[0] != REQUIRED_TORCH:
        raise ImportError(
            f"nimble_rs was built for torch {REQUIRED_TORCH}, but this Python has torch {found}; "
            f"install torch=={REQUIRED_TORCH} (or rebuild nimble_rs against torch {found})"
        )
