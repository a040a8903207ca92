"""One colour per section path: the same in `looptrace plot`, `report` and `watch`."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from looptrace._cli import main
from looptrace._demo import run_demo
from looptrace._offline.palette import (
    OTHER,
    OTHER_COLOUR,
    PALETTE,
    close,
    colour_of,
    colours,
    preferred,
)
from looptrace._offline.watch import Watcher, view

SECTIONS = ["root.training." + name for name in ("data", "forward", "backward", "optimizer")]


def test_a_path_keeps_its_colour_whatever_else_is_shown() -> None:
    """A path's colour comes from the path: the same with other sections, or in another order."""
    alone = {path: colours([path])[path] for path in SECTIONS}
    assert alone == {path: PALETTE[preferred(path)] for path in SECTIONS}
    together = colours([*reversed(SECTIONS), "root.training.eval"])
    assert {path: together[path] for path in SECTIONS} == alone
    assert together[OTHER] == OTHER_COLOUR


def test_paths_shown_together_never_share_a_colour() -> None:
    """Paths whose hash picks the same colour: the later one (in path order) takes the next."""
    first = "root.a"
    clash = next(f"root.s{n}" for n in range(10_000) if preferred(f"root.s{n}") == preferred(first))
    mapping = colours([clash, first])
    assert mapping[first] == PALETTE[preferred(first)]
    assert mapping[clash] == PALETTE[(preferred(first) + 1) % len(PALETTE)]
    many = colours(f"root.s{n}" for n in range(len(PALETTE)))
    assert len(set(many.values()) - {OTHER_COLOUR}) == len(PALETTE)


def test_a_nested_section_takes_the_colour_of_its_shown_section() -> None:
    """`forward.encoder` is drawn in `forward`'s colour; a path under none has no colour."""
    mapping = colours(SECTIONS)
    forward = mapping["root.training.forward"]
    assert colour_of("root.training.forward.encoder", mapping) == forward
    assert colour_of("root.training.forwarder", mapping) is None
    assert colour_of("root.validation", mapping) is None


def test_the_report_and_the_live_view_use_the_palette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's sections: the report's legend and watch's rows have each path's colour."""
    run_demo(steps=300, directory=tmp_path / "demo")
    output = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "demo"), "-o", str(output)]) == 0
    capsys.readouterr()
    page = output.read_text()
    legend = dict(
        (name, colour)
        for colour, name in re.findall(r'<i style="background:(#[0-9a-f]{6})"></i>([\w.]+)<', page)
    )
    names = ["backward", "checkpoint", "eval", "forward", "data", "optimizer"]
    expected = colours(f"root.training.{name}" for name in names)
    assert legend == {
        **{name: expected[f"root.training.{name}"] for name in names},
        OTHER: OTHER_COLOUR,
    }

    watcher = Watcher([str(tmp_path / "demo" / "snapshots.jsonl")], print, lambda: 0.0)
    watcher.poll()
    console = Console(width=120, file=io.StringIO(), color_system="truecolor")
    painted = {
        segment.text.strip(): segment.style.color.triplet.hex
        for segment in console.render(view(watcher.state, 0.0))
        if segment.style and segment.style.color and segment.style.color.triplet
    }
    assert painted == {
        **{name: expected[f"root.training.{name}"] for name in names},
        "encoder": expected["root.training.forward"],  # below forward, in its colour
        "decoder": expected["root.training.forward"],
    }


def test_a_section_name_has_one_colour_in_every_run_and_timer() -> None:
    """`backward` has its colour under any timer and beside any other usual section."""
    runs = [
        ["root.train.data", "root.train.forward", "root.train.backward"],
        ["root.fit.backward", "root.fit.eval", "root.fit.checkpoint", "root.fit.optimizer"],
        ["root.step.backward", "root.step.loss", "root.step.allreduce"],
    ]
    backward = {colours(paths)[next(p for p in paths if p.endswith(".backward"))] for paths in runs}
    assert backward == {PALETTE[preferred("backward")]}


def test_the_usual_sections_stand_apart_in_a_stack() -> None:
    """Evaluation, optimizer and checkpoint (three teals once) get colours far apart."""
    names = ["data", "forward", "backward", "optimizer", "eval", "checkpoint", "loss", "allreduce"]
    mapping = colours(f"root.train.{name}" for name in names)
    shown = [mapping[f"root.train.{name}"] for name in names]
    assert not any(close(a, b) for i, a in enumerate(shown) for b in shown[i + 1 :])


def test_close_shades_of_a_hashed_name_move_apart() -> None:
    """A name whose hashed colour is close to a shown one takes a colour far from it."""
    first = "root.a"
    near = next(
        f"root.s{n}"
        for n in range(10_000)
        if close(PALETTE[preferred(f"root.s{n}")], PALETTE[preferred(first)])
        and preferred(f"root.s{n}") != preferred(first)
    )
    mapping = colours([first, near])
    assert not close(mapping[first], mapping[near])
    assert mapping[first] == PALETTE[preferred(first)]
