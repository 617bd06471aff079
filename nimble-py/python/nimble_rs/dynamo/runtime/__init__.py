"""Capturing the planned programs, choosing between them, checking their accuracy and running them."""
