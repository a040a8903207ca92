"""The span and snapshot files are created private and never written through a foreign link."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace

OTHER_UID = 4242  # a user other than the one running the tests (root can hand a link to it)
SETTINGS = ("trace_file", "snapshot_file")


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process's umask after the test."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _write_a_window(**files: Path) -> None:
    lt = looptrace.configure(tracer_provider=TracerProvider(), trace_every=1, **files)
    with lt.timer("train").section("step"):
        pass
    lt.reset()
    lt.shutdown()


@pytest.mark.parametrize("sticky", [0, stat.S_ISVTX])
@pytest.mark.parametrize("setting", SETTINGS)
def test_a_link_planted_by_another_user_is_refused(
    tmp_path: Path, setting: str, sticky: int
) -> None:
    """A link in a shared directory, owned by someone else: ConfigError, the target intact.

    World-writable with the sticky bit (like `/tmp`, where the kernel may refuse the link
    itself) or without (a team's scratch directory, where nothing else protects it).
    """
    if os.geteuid() != 0:
        pytest.skip("making a link owned by another user needs root")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777 | sticky)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    link = shared / "spans.jsonl"
    link.symlink_to(victim)
    os.lchown(link, OTHER_UID, OTHER_UID)
    with pytest.raises(looptrace.ConfigError) as raised:
        _write_a_window(**{setting: link})
    assert str(raised.value) == (
        f"{setting}: cannot open {link} for writing: it is a symbolic link owned by another "
        f"user (uid {OTHER_UID}); looptrace does not write through it"
    )
    assert victim.read_text() == "untouched\n"
    assert link.is_symlink()


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_link_the_user_made_is_followed(tmp_path: Path, setting: str) -> None:
    """A link owned by the user running looptrace leads to its target, as they meant."""
    target = tmp_path / "scratch" / "out.jsonl"
    target.parent.mkdir()
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    _write_a_window(**{setting: link})
    assert link.is_symlink()
    assert target.read_text().count("\n") >= 1


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o600), (0o000, 0o600), (0o277, 0o400)])
def test_new_files_are_private_unless_the_umask_is_stricter(
    tmp_path: Path, mask: int, mode: int
) -> None:
    """Files looptrace creates get 0600, less where the umask takes more away."""
    os.umask(mask)
    paths = {setting: tmp_path / f"{setting}.jsonl" for setting in SETTINGS}
    _write_a_window(**paths)
    assert {s: stat.S_IMODE(p.stat().st_mode) for s, p in paths.items()} == dict.fromkeys(
        SETTINGS, mode
    )


@pytest.mark.usefixtures("umask")
def test_a_file_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    """A user who made the file readable by others first keeps it so; looptrace appends."""
    paths = {setting: tmp_path / f"{setting}.jsonl" for setting in SETTINGS}
    for path in paths.values():
        path.touch()
        path.chmod(0o644)
    _write_a_window(**paths)
    assert {s: stat.S_IMODE(p.stat().st_mode) for s, p in paths.items()} == dict.fromkeys(
        SETTINGS, 0o644
    )
    assert all(p.read_text() for p in paths.values())
