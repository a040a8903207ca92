"""The documentation's Python examples: each one runs, on a fake clock, or says why it cannot.

Every ```python block of the README, of docs/ and of deploy/README.md (which the docs include)
runs in this test: the blocks of one page in order, in one namespace, so that a block may use
what an earlier one made. `looptrace.configure()` runs on a fake clock there, and the
names an example takes for granted (`loader`, `model`, `opt`, `logger` …) are stand-ins that
move that clock. A block that cannot run here (it needs a collector, a GPU, a cluster, a
framework's run) is marked as illustration by the line before its fence:

    <!-- not run: needs a collector -->

Every block, run or not, must name only looptrace modules, attributes and `configure()`
arguments that exist: `test_documented_names_exist` checks them without running anything.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
import looptrace.testing
from looptrace.testing import FakeClock

ROOT = Path(__file__).parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "deploy" / "README.md",
]
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\s]*)")
NOT_RUN = re.compile(r"^\s*<!-- not run: (?P<reason>\S.*?) -->\s*$")
README_MAX_LINES = 250


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it is, its code, and why it is not run (None: it runs)."""

    page: Path
    line: int
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        """Return `page:line`, the place a failure names."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fences(page: Path) -> Iterator[tuple[int, str, list[str], str]]:
    """Yield each fenced block of a page: its first line, info string, lines, preceding line."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, info = match["indent"], match["info"]
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        yield start + 1, info, body, lines[start - 1] if start else ""
        i += 1


def blocks(page: Path) -> list[Block]:
    """Return the Python blocks of a page, in order."""
    found = []
    for line, info, body, before in fences(page):
        if info != "python":
            continue
        marker = NOT_RUN.match(before)
        found.append(Block(page, line, "\n".join(body), marker["reason"] if marker else None))
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]
RUN_PAGES = [page for page in PAGES if any(b.not_run is None for b in blocks(page))]


def test_readme_is_short() -> None:
    """The README stays a front door: at most 250 lines."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_readme_links_point_into_the_repository() -> None:
    """Every relative link of the README names a file that exists (mkdocs checks the docs')."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [t for t in targets if "://" not in t]
    assert relative
    assert [t for t in relative if not (ROOT / t).exists()] == []


def test_python_fences_say_python() -> None:
    """A Python block is fenced as ```python, so that no spelling slips past these tests."""
    odd = [
        f"{page.relative_to(ROOT)}:{line}: ```{info}"
        for page in PAGES
        for line, info, _, _ in fences(page)
        if info.lower() in {"py", "python3", "pycon", "py3", "ipython"}
    ]
    assert odd == []


def test_the_docs_have_examples_that_run() -> None:
    """The README's loop and the guide's examples run; only the rest is illustration."""
    ran = {b.page.name for b in ALL_BLOCKS if b.not_run is None}
    assert {"README.md", "getting-started.md", "timers.md"} <= ran


# Running the examples -------------------------------------------------------------------------


class StandIns:
    """What the examples take for granted, on one fake clock: a loader, a model, an optimizer."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.logged: list[tuple[dict[str, float], int | None]] = []

    def namespace(self) -> dict[str, Any]:
        """Return the names an example may use without defining them."""
        stand_ins = self
        clock = self.clock

        class Loss:
            def backward(self) -> None:
                clock.advance(0.040)

        class Model:
            def __call__(self, batch: object) -> Loss:
                clock.advance(0.020)
                return Loss()

        class Optimizer:
            def step(self) -> None:
                clock.advance(0.005)

            def zero_grad(self) -> None:
                clock.advance(0.001)

        class Loader:
            def __len__(self) -> int:
                return 300

            def __iter__(self) -> Iterator[int]:
                for item in range(len(self)):
                    clock.advance(0.003)
                    yield item

        class Logger:
            def log(self, metrics: dict[str, float], step: int | None = None) -> None:
                stand_ins.logged.append((metrics, step))

        def validate(timer: looptrace.Timer) -> None:
            for _ in range(3):
                timer.record("forward")
                clock.advance(0.010)
            timer.stop()

        def save(model: object) -> None:
            clock.advance(2.0)

        return {
            "__name__": "looptrace_docs_example",
            "clock": clock,
            "loader": Loader(),
            "model": Model(),
            "opt": Optimizer(),
            "logger": Logger(),
            "to_device": lambda batch: batch,
            "validate": validate,
            "save": save,
        }


@dataclass
class DocsEnv:
    """The looptraces the examples configured, and the fake clock they share with stand-ins."""

    clock: FakeClock
    made: list[looptrace.Looptrace]

    def namespace(self) -> tuple[StandIns, dict[str, Any]]:
        """Return fresh stand-ins on the shared clock and the namespace they make."""
        stand_ins = StandIns(self.clock)
        return stand_ins, stand_ins.namespace()


@pytest.fixture
def docs_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[DocsEnv]:
    """Run examples in a temporary directory, on a fake clock, with no exporter variables.

    `configure()` gets a provider of its own (no global one is installed); everything it made
    is shut down after the test.
    """
    for name in list(os.environ):
        if name.startswith(("OTEL_", "LOOPTRACE_")) and name != "LOOPTRACE_EXPECT_CORE":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    env = DocsEnv(FakeClock(), [])
    configure = looptrace.configure

    def on_a_fake_clock(*args: Any, **kwargs: Any) -> looptrace.Looptrace:
        kwargs.setdefault("clock", env.clock)
        kwargs.setdefault(
            "tracer_provider", TracerProvider(id_generator=looptrace.StepIdGenerator())
        )
        lt = configure(*args, **kwargs)
        env.made.append(lt)
        return lt

    monkeypatch.setattr(looptrace, "configure", on_a_fake_clock)
    yield env
    for lt in env.made:
        lt.shutdown()


def call_tests(namespace: dict[str, Any]) -> None:
    """Call the pytest-style tests an example defines, with `looptrace_capture` if they ask."""
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            params = inspect.signature(value).parameters
            assert set(params) <= {"looptrace_capture"}, f"{name} asks for {set(params)}"
            if params:
                capture = looptrace.testing.capture()
                try:
                    value(capture)
                finally:
                    capture.lt.shutdown()
            else:
                value()


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(page: Path, docs_env: DocsEnv) -> None:
    """A page's examples run in order, on a fake clock, without an internal error."""
    _, namespace = docs_env.namespace()
    for block in blocks(page):
        if block.not_run is not None:
            continue
        code = compile(block.code, block.where, "exec")
        try:
            exec(code, namespace)  # the documentation's own example
        except ModuleNotFoundError as error:  # a framework this Python has not (no torch wheel)
            if error.name is None or importlib.util.find_spec(error.name) is not None:
                raise
            pytest.skip(f"{block.where}: needs {error.name}, not installed here")
        call_tests(namespace)
    assert docs_env.made, f"{page.name}: no example configured a looptrace"
    for lt in docs_env.made:
        lt.shutdown()
    assert [lt.health().internal_errors for lt in docs_env.made] == [0] * len(docs_env.made)


def test_the_getting_started_loop_times_its_sections(docs_env: DocsEnv) -> None:
    """Getting started's loop, on the stand-ins' clock, times what its comments say."""
    stand_ins, namespace = docs_env.namespace()
    page = ROOT / "docs" / "getting-started.md"
    loop = next(b for b in blocks(page) if "train.iterate" in b.code)
    exec(compile(loop.code, loop.where, "exec"), namespace)
    stats = namespace["stats"]
    forward = stats["root.training.forward"]
    assert (stats.step, forward.count, forward.mean) == (299, 100, pytest.approx(0.020))
    assert [step for _, step in stand_ins.logged] == [99, 199, 299]
    first = stand_ins.logged[0][0]
    assert (
        first["timing.root.training.data.mean"],
        first["timing.root.training.backward.mean"],
    ) == (
        pytest.approx(0.003),
        pytest.approx(0.040),
    )


# Checking the names an example uses -----------------------------------------------------------

# What a documented call (or an item, `[]`) gives, to follow `lt.timer(...)` to a Timer and on;
# ATTRIBUTES the same for attributes.
RETURNS: dict[tuple[str, str], str] = {
    ("looptrace", "configure"): "Looptrace",
    ("looptrace.testing", "capture"): "Capture",
    ("Looptrace", "timer"): "Timer",
    ("Looptrace", "reset"): "Snapshot",
    ("Looptrace", "health"): "Health",
    ("Timer", "timer"): "Timer",
    ("Timer", "reset"): "Snapshot",
    ("Timer", "section"): "Section",
    ("Snapshot", "[]"): "SectionStats",
}
ATTRIBUTES = {("Capture", "lt"): "Looptrace", ("Capture", "clock"): "FakeClock"}
CLASSES: dict[str, Any] = {
    "Looptrace": looptrace.Looptrace,
    "Timer": looptrace.Timer,
    "Section": looptrace.Section,
    "Snapshot": looptrace.Snapshot,
    "SectionStats": looptrace.SectionStats,
    "Health": looptrace.Health,
    "Capture": looptrace.testing.Capture,
    "FakeClock": looptrace.testing.FakeClock,
}
# Names the examples take for granted, unless a block of the page binds them otherwise: the
# fixture of looptrace.testing, and the guide's `lt`, `train` and `snap`.
GIVEN = {
    "looptrace_capture": "Capture",
    "lt": "Looptrace",
    "train": "Timer",
    "snap": "Snapshot",
    "snapshot": "Snapshot",
}


PACKAGE = Path(looptrace.__file__).parent


def module_source(module: str) -> Path | None:
    """Return the source file of a looptrace module or package, found on disk (no import)."""
    parts = module.split(".")
    if parts[0] != "looptrace":
        return None
    path = PACKAGE.joinpath(*parts[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def module_names(module: str) -> set[str] | None:
    """Return the names a looptrace module offers, submodules included; None if none such.

    They are read from its source: nothing is imported, so no host framework either.
    """
    source = module_source(module)
    if source is None:
        return None
    names: set[str] = set()
    if module == "looptrace":
        names |= set(looptrace.__all__)
    else:
        for node in ast.parse(source.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if source.name == "__init__.py":
        names |= {p.stem for p in source.parent.glob("*.py") if p.stem != "__init__"}
        names |= {d.name for d in source.parent.iterdir() if (d / "__init__.py").is_file()}
    return names


def has_attribute(cls: Any, name: str) -> bool:
    """Whether instances of a looptrace class have `name`: a method, property, slot or field."""
    return (
        hasattr(cls, name)
        or name in getattr(cls, "__dataclass_fields__", {})
        or any(name in getattr(k, "__annotations__", {}) for k in cls.__mro__)
    )


class NameChecker(ast.NodeVisitor):
    """Follow looptrace's modules and objects through an example; list the names that are gone.

    Modules, module attributes, methods and attributes of the public classes, `configure()`
    arguments.
    """

    def __init__(self) -> None:
        self.kinds: dict[str, str] = dict(GIVEN)  # variable -> a class name or "module:<name>"
        self.missing: list[str] = []

    def kind(self, node: ast.expr) -> str | None:  # noqa: PLR0911 - one return per kind of node
        """Return what an expression is: a class of RETURNS, `module:<name>`, or None."""
        if isinstance(node, ast.Name):
            return self.kinds.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.kind(node.value)
            if owner is None:
                return None
            if owner.startswith("module:"):
                module = owner.removeprefix("module:")
                names = module_names(module)
                if names is None or node.attr not in names:
                    self.missing.append(f"{module}.{node.attr}")
                    return None
                if module_names(f"{module}.{node.attr}") is not None:
                    return f"module:{module}.{node.attr}"
                return f"{module}.{node.attr}"
            if owner in CLASSES and not has_attribute(CLASSES[owner], node.attr):
                self.missing.append(f"{owner}.{node.attr}")
                return None
            return ATTRIBUTES.get((owner, node.attr), f"{owner}.{node.attr}")
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Subscript):
            owner = self.kind(node.value)
            self.visit(node.slice)
            return RETURNS.get((owner, "[]")) if owner else None
        self.generic_visit(node)
        return None

    def call(self, node: ast.Call) -> str | None:
        """Check a call's keywords where the callee is `configure()`; return what it gives."""
        callee = self.kind(node.func)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self.visit(arg)
        if callee is None:
            return None
        if callee in {"looptrace.configure", "configure"}:
            parameters = inspect.signature(looptrace.configure).parameters
            self.missing += [
                f"configure({k.arg}=)" for k in node.keywords if k.arg and k.arg not in parameters
            ]
        if callee == "configure":
            return "Looptrace"
        owner, _, name = callee.rpartition(".")
        return RETURNS.get((owner, name))

    def visit_Import(self, node: ast.Import) -> None:
        """Check `import looptrace...` and remember the module."""
        for alias in node.names:
            if alias.name.split(".")[0] != "looptrace":
                continue
            if module_names(alias.name) is None:
                self.missing.append(alias.name)
            elif alias.asname:
                self.kinds[alias.asname] = f"module:{alias.name}"
            else:
                self.kinds["looptrace"] = "module:looptrace"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        """Check `from looptrace... import name` and remember what the name is."""
        module = node.module or ""
        if module.split(".")[0] != "looptrace":
            return
        names = module_names(module)
        if names is None:
            self.missing.append(module)
            return
        for alias in node.names:
            if alias.name not in names:
                self.missing.append(f"{module}.{alias.name}")
            elif module_names(f"{module}.{alias.name}") is not None:
                self.kinds[alias.asname or alias.name] = f"module:{module}.{alias.name}"
            elif alias.name == "configure":
                self.kinds[alias.asname or alias.name] = "configure"
            else:
                self.kinds[alias.asname or alias.name] = f"{module}.{alias.name}"

    def visit_Assign(self, node: ast.Assign) -> None:
        """Remember what an assignment's names are."""
        self.bind(node.targets, node.value)

    def visit_For(self, node: ast.For) -> None:
        """Check the iterable, then the body in order."""
        self.visit(node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    def visit_With(self, node: ast.With) -> None:
        """Check the context managers, then the body in order."""
        for item in node.items:
            self.visit(item.context_expr)
        for statement in node.body:
            self.visit(statement)

    def visit_Expr(self, node: ast.Expr) -> None:
        """Check an expression statement."""
        self.kind(node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """Check an attribute inside another statement."""
        self.kind(node)

    def visit_Call(self, node: ast.Call) -> None:
        """Check a call inside another statement."""
        self.call(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """Check an item lookup inside another statement."""
        self.kind(node)

    def bind(self, targets: list[ast.expr], value: ast.expr) -> None:
        """Give assigned names the kind of their value, element by element for tuples."""
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for name, item in zip(target.elts, value.elts, strict=False):
                    self.bind([name], item)
            elif isinstance(target, ast.Name):
                kind = self.kind(value)
                if kind is None:
                    self.kinds.pop(target.id, None)
                else:
                    self.kinds[target.id] = kind
            else:
                self.visit(value)


def missing_names(code: str, before: tuple[str, ...] = ()) -> list[str]:
    """Return the looptrace names an example uses that do not exist.

    `before` are the page's earlier blocks, which bind names this one uses (`lt`, `train` …).
    """
    checker = NameChecker()
    for earlier in before:
        checker.visit(ast.parse(earlier))
    checker.missing = []
    checker.visit(ast.parse(code))
    return checker.missing


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.where)
def test_documented_names_exist(block: Block) -> None:
    """Every looptrace name an example uses exists (run or not); every block is Python."""
    page = blocks(block.page)
    before = tuple(b.code for b in page[: page.index(block)])
    assert missing_names(block.code, before) == []


def test_the_name_check_finds_what_is_gone() -> None:
    """A name that does not exist is reported wherever an example uses it."""
    code = textwrap.dedent(
        """
        import looptrace
        from looptrace import Timer, NoSuchClass
        from looptrace.integrations.lightning import LooptraceProfiler, NoSuchProfiler
        from looptrace.integrations import mlflow as lt_mlflow, nosuchlogger
        import looptrace.nosuchmodule
        lt = looptrace.configure("svc", trace_every=1, no_such_option=2)
        train, infer = lt.timer("training"), lt.timer("inference")
        train.recrod("forward")
        with infer.section("x"):
            pass
        snap = train.reset()
        snap.as_metrics(prefix="timing")
        snap.no_such_method()
        snap["root.training"].p99
        snap["root.training"].p98
        lt.health().dropped_spans
        lt.health().dropped_spanz
        lt_mlflow.log_snapshot(snap)
        lt_mlflow.log_snapshots(snap)
        looptrace.testing.FakeClock()
        looptrace.testing.FakeClok()
        """
    )
    assert missing_names(code) == [
        "looptrace.NoSuchClass",
        "looptrace.integrations.lightning.NoSuchProfiler",
        "looptrace.integrations.nosuchlogger",
        "looptrace.nosuchmodule",
        "configure(no_such_option=)",
        "Timer.recrod",
        "Snapshot.no_such_method",
        "SectionStats.p98",
        "Health.dropped_spanz",
        "looptrace.integrations.mlflow.log_snapshots",
        "looptrace.testing.FakeClok",
    ]


def test_illustrations_say_why() -> None:
    """Every block that is not run gives its reason, and the marker touches its fence."""
    for page in PAGES:
        lines = page.read_text().splitlines()
        fence_lines = {line - 1 for line, _, _, _ in fences(page)}
        for index, text in enumerate(lines):
            if text.strip().startswith("<!-- not run"):
                assert NOT_RUN.match(text), f"{page.name}:{index + 1}: say why it is not run"
                assert index + 1 in fence_lines, f"{page.name}:{index + 1}: no fence after it"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="mkdocs: pip install '.[docs]'"
)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes: no broken link, anchor or API reference."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reference = (tmp_path / "reference" / "index.html").read_text(encoding="utf-8")
    # Signatures are formatted, one parameter a line, and their annotations link to the
    # public names the reference documents, not to looptrace's private modules.
    assert "configure(\n    service_name: str | None = None,\n" in re.sub(r"<[^>]+>", "", reference)
    assert 'href="#looptrace.Snapshot">Snapshot</a>' in reference
    assert 'href="#looptrace._' not in reference


def test_the_thresholds_table_is_the_rendered_table() -> None:
    """The "What is slow" page's thresholds table is exactly `thresholds.markdown_table()`."""
    from looptrace._stats import thresholds

    assert thresholds.markdown_table().strip() in (ROOT / "docs" / "answers.md").read_text()
