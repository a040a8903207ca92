"""The error raised for misuse of looptrace's API."""

from __future__ import annotations


class TimerError(ValueError):
    """A timer was used in a way looptrace cannot measure correctly.

    Raised before any state changes, so nothing already recorded is lost. It subclasses
    `ValueError` because every case is a bad argument or a call out of order.
    """
