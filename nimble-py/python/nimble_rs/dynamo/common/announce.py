"""Warnings said once per process and key: every fallback and stopped option of the backend is
announced this way, never silently, and never again for the same key."""

import warnings
from typing import Any

_WARNED: set = set()


def warn_once(key: Any, message: str, category: type = RuntimeWarning) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, category, stacklevel=3)
