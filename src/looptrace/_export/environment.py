"""The environment variables looptrace reads: the rows of the settings table."""

from __future__ import annotations

from looptrace._export.settings_table import SETTINGS as ENVIRONMENT
from looptrace._export.settings_table import Setting as EnvVar
from looptrace._export.settings_table import signal_variable

__all__ = ["ENVIRONMENT", "EnvVar", "signal_variable"]
