"""Ranks from the launcher's environment and cross-rank statistics."""
