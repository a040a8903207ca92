"""The `slow` marker of tests/conftest.py: tests that start a process or a real server."""

from __future__ import annotations

import textwrap
from pathlib import Path

from .helpers.markers import slow_functions

MODULE = """
    import subprocess

    import pytest

    from .helpers.otlp_server import OtlpReceiver


    def _run(code):
        return subprocess.run(["python", "-c", code], check=True)


    def _twice(code):
        _run(code)
        _run(code)


    @pytest.fixture
    def receiver():
        with OtlpReceiver("grpc") as rx:
            yield rx


    @pytest.mark.skipif(not hasattr(subprocess, "run"), reason="decorators are not the body")
    def test_in_process(cap):
        assert cap.lt.reset() == {}


    def test_through_a_helper_of_a_helper():
        _twice("pass")


    def test_with_the_receiver_fixture(receiver):
        assert receiver.spans == []
"""


def test_slow_functions_follow_helpers_and_fixtures(tmp_path: Path) -> None:
    """A function is slow when it, or a module function it uses, names a slow helper."""
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(MODULE))
    assert slow_functions(path) == {
        "_run",
        "_twice",
        "receiver",
        "test_through_a_helper_of_a_helper",
        "test_with_the_receiver_fixture",
    }


def test_a_test_that_runs_ranks_through_a_shared_helper_is_slow(tmp_path: Path) -> None:
    """`run_ranks` of tests/helpers/ starts processes: a test calling it is slow."""
    path = tmp_path / "test_ranks.py"
    path.write_text(
        "from .helpers.processes import run_ranks\n\n\n"
        "def test_four_ranks(tmp_path):\n"
        "    assert run_ranks('worker.py', 4, tmp_path, timeout_s=60)\n\n\n"
        "def test_in_process():\n"
        "    assert True\n"
    )
    assert slow_functions(path) == {"test_four_ranks"}
