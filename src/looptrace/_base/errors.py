"""The errors looptrace raises: misuse of its API, and settings it cannot use."""

from __future__ import annotations


class TimerError(ValueError):
    """A timer was used in a way looptrace cannot measure correctly.

    Raised before any state changes, so nothing already recorded is lost. It subclasses
    `ValueError` because every case is a bad argument or a call out of order.
    """


class ConfigError(ValueError):
    """A setting passed to `configure()` or read from the environment cannot be used.

    The message names the argument or environment variable. It is raised by `configure()`
    before anything is installed, never later from a background thread. Header values are
    never part of the message, since they often carry credentials.
    """
