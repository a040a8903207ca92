"""`looptrace summary` of snapshot or metrics files, each window folded as it is read.

The reader yields one window at a time (`window_records.read_windows`); the `--rank` and
`--since-step` selections drop it or keep it at once, and a kept one goes to its rank's
`PathFold` of each of its paths and to the path's `QuantileFold` (`window_fold.py`), to the
description, spread, throughput, memory and system folds (`summary.WindowFacts`) and to the
findings (`findings.FindingsFold`), then is dropped. Memory grows with the ranks, paths,
units and figures, not with the windows. The table is `summarize_windows`'s, exactly but for
the quantiles of a path with more than `KEEP` windows (within 0.034 %: `window_fold.py`);
with several ranks the per-rank statistics lack quantiles (NaN): the summary shows only
their means.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from looptrace._offline.findings import FindingsFold, recorded_text
from looptrace._offline.reader import InputError, JsonLinesFile, Warn
from looptrace._offline.summary import Summary, WindowFacts
from looptrace._offline.window_fold import PathFold, QuantileFold, merged
from looptrace._offline.window_records import Window, read_windows
from looptrace._stats.snapshot import SectionStats


class SummaryFold:
    """The windows of a summary, folded: per rank and path a `PathFold`, and the rest."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self.per_rank: dict[int, dict[str, PathFold]] = {}
        self.quantiles: dict[str, QuantileFold] = {}  # by path, over every rank
        self.facts = WindowFacts()
        self.findings = FindingsFold()

    def add(self, window: Window) -> None:
        """Fold one window."""
        seq = self.facts.windows
        paths = self.per_rank.get(window.rank)
        if paths is None:
            paths = self.per_rank[window.rank] = {}
        for path, stats in window.stats.items():
            fold = paths.get(path)
            if fold is None:
                fold = paths[path] = PathFold()
            fold.add(seq, stats)
            if stats.count > 0:
                quantiles = self.quantiles.get(path)
                if quantiles is None:
                    quantiles = self.quantiles[path] = QuantileFold()
                quantiles.add(stats)
        self.facts.add(window)
        self.findings.add(window)

    def summary(self) -> Summary:
        """Return the summary of the windows folded (as `summarize_windows` of them)."""
        several = len(self.per_rank) > 1
        per_rank = {
            rank: {
                path: merged([fold], None if several else self.quantiles.get(path))
                for path, fold in sorted(paths.items())
            }
            for rank, paths in sorted(self.per_rank.items())
        }
        combined = self._combined() if several else dict(next(iter(per_rank.values())))
        return self.facts.summary(combined, per_rank)

    def _combined(self) -> dict[str, SectionStats]:
        """Return each path's statistics over every rank, folded from the ranks' folds."""
        by_path: dict[str, list[PathFold]] = {}
        for paths in self.per_rank.values():
            for path, fold in paths.items():
                by_path.setdefault(path, []).append(fold)
        return {
            path: merged(folds, self.quantiles.get(path)) for path, folds in sorted(by_path.items())
        }


def fold_windows(
    windows: Iterable[Window], ranks: Sequence[int] | None, since_step: int | None
) -> SummaryFold | None:
    """Fold the windows of `ranks` (all if None) from step `since_step` on (as `select`).

    Returns None when there is no window at all.

    Raises:
        InputError: a wanted rank is not among the windows, or none is left.

    """
    keep = set(ranks) if ranks else None
    present: set[int] = set()
    fold = SummaryFold()
    for window in windows:
        present.add(window.rank)
        if keep is not None and window.rank not in keep:
            continue
        if since_step is not None and (window.step is None or window.step < since_step):
            continue
        fold.add(window)
    if not present:
        return None
    missing = sorted(set(ranks or ()) - present)
    if missing:
        have = ", ".join(str(r) for r in sorted(present))
        raise InputError(f"no rank {', '.join(map(str, missing))} in the input (ranks: {have})")
    if not fold.facts.windows:
        raise InputError(f"nothing at step {since_step} or later")
    return fold


def summarize_files(
    kind: str,
    files: Sequence[JsonLinesFile],
    warn: Warn,
    ranks: Sequence[int] | None,
    since_step: int | None,
) -> tuple[Summary, str | None] | None:
    """Return the summary of snapshot or metrics files and their findings' lines (or None).

    None: the files hold no readable window.
    """
    fold = fold_windows(read_windows(kind, files, warn), ranks, since_step)
    if fold is None:
        return None
    return fold.summary(), recorded_text(fold.findings.recorded())
