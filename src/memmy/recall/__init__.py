"""Recall: fused search and rendering of injected context."""
