"""Fused-kernel task graphs of compiled models for the research loop (`kernel_graphs`), with each kernel's launch data."""
