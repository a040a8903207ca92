"""Every command that prints names from files escapes them alike: terminal, table and page."""

from __future__ import annotations

import io
from html import escape as html_escape
from pathlib import Path

import pytest
from rich.console import Console

from looptrace._cli import main
from looptrace._offline.text import escaped
from looptrace._offline.watch import Watcher, view

from .helpers.hostile import HOSTILE, hostile_run, shown_raw
from .helpers.runs import record_run

CLEAN = (("clean-base", 50), ("clean-cand", 80))
NAMES = pytest.mark.parametrize("name", list(HOSTILE.values()), ids=list(HOSTILE))


def _out(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    assert shown_raw(captured.err) == []
    return captured.out


@NAMES
@pytest.mark.parametrize("which", ["spans.jsonl", "snapshots.jsonl"])
def test_summary_escapes_names_and_findings(
    which: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`summary`: the hostile name shown escaped, no control or bidi character, no extra row."""
    clean = _out(capsys, "summary", record_run(tmp_path / "clean").span_file.parent / which)
    out = _out(capsys, "summary", hostile_run(tmp_path / "run", name) / which)
    assert shown_raw(out) == []
    assert escaped(name) in out
    assert len(out.splitlines()) == len(clean.splitlines())


@NAMES
def test_compare_escapes_names(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`compare` (a CI gate fed by untrusted runs): names escaped in the table and the verdict."""
    base = hostile_run(tmp_path / "base", name)
    cand = hostile_run(tmp_path / "cand", name, forward_ms=80)
    clean = [record_run(tmp_path / side, forward_ms=ms).snapshot_file for side, ms in CLEAN]
    table = _out(capsys, "compare", *clean, "--max-regression", "-100")
    out = _out(capsys, "compare", base, cand, "--max-regression", "-100")
    assert shown_raw(out) == []
    assert escaped(name) in out
    assert len(out.splitlines()) == len(table.splitlines())


@NAMES
def test_watch_escapes_names_and_findings(name: str, tmp_path: Path) -> None:
    """`watch`: the live view shows the name and the findings escaped, not ESC, CSI or OSC."""
    run = hostile_run(tmp_path / "run", name)
    watcher = Watcher([str(run / "snapshots.jsonl")], print, lambda: 0.0)
    assert watcher.poll() == 2
    console = Console(file=io.StringIO(), width=300, color_system=None, force_terminal=False)
    console.print(view(watcher.state, 0.0))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert shown_raw(out) == []
    assert out.count(escaped(name)) == 2  # its row, and the finding that names it


@NAMES
def test_report_shows_names_escaped_as_the_terminal_does(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The HTML page: bidi overrides and control characters shown as escapes, never as they are."""
    page = tmp_path / "report.html"
    _out(capsys, "report", hostile_run(tmp_path / "run", name), "-o", page)
    html = page.read_text(encoding="utf-8")
    assert shown_raw(html) == []
    assert html_escape(escaped(name)) in html  # as the terminal shows it, then HTML-escaped


def test_report_markup_in_a_name_stays_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name that closes the script or style element is escaped text: no element of its own."""
    name = "</script><script>alert('x')</script></style>&"
    page = tmp_path / "report.html"
    _out(capsys, "report", hostile_run(tmp_path / "run", name), "-o", page)
    html = page.read_text(encoding="utf-8")
    assert html.count("<script") == 2 and html.count("</style>") == 1  # the page's own
    assert "&lt;/script&gt;&lt;script&gt;alert(&#39;x&#39;)" in html


def test_report_code_escapes_nothing_by_hand() -> None:
    """The report's modules leave escaping to the templates' autoescape: no escape() call."""
    offline = Path(__file__).resolve().parents[1] / "src" / "looptrace" / "_offline"
    for module in sorted(offline.glob("report*.py")):
        source = module.read_text(encoding="utf-8")
        assert "escape(" not in source and "import html" not in source, module.name
