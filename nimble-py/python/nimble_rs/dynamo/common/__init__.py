"""Helpers every layer of the backend uses (warnings said once, CUDA-event timing); they import nothing of the backend."""
