"""Progress bars for the commands that read or send large files (tqdm, when installed)."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol


class Progress(Protocol):
    """What the commands need of a progress bar."""

    def update(self, n: int) -> object:
        """Advance by `n` units."""
        ...

    def set_postfix_str(self, text: str) -> object:
        """Show `text` after the bar."""
        ...

    def close(self) -> object:
        """Remove the bar."""
        ...


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class ByteProgress:
    """A bar over bytes read, shown on stderr when it is a terminal (tqdm decides)."""

    def __init__(self, total: int, desc: str) -> None:
        try:
            from tqdm import tqdm  # noqa: PLC0415 - optional, part of the `files` extra
        except ImportError:
            self.bar: Progress = _NoBar()
        else:
            options: dict[str, Any] = {"unit": "B", "unit_scale": True, "unit_divisor": 1024}
            self.bar = tqdm(total=total, desc=desc, disable=None, leave=False, **options)

    def __enter__(self) -> Progress:
        return self.bar

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.bar.close()
