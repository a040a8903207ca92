"""The diagnosis: a window's findings, its checks, and what it sees of the run before it."""
