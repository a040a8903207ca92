"""The package's layers (docs/architecture.md): what the lowest layers may import."""

from __future__ import annotations

import ast
from pathlib import Path

import looptrace

PACKAGE = Path(looptrace.__file__).parent


def imported_modules(layer: str, *, typing: bool = True) -> dict[str, set[str]]:
    """Return every module each file of a layer imports, by file name.

    `typing=False` leaves out the imports under `if TYPE_CHECKING:` (annotations only), as the
    contract in pyproject.toml does.
    """
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / layer).glob("*.py")):
        names: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        typed = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if not typing and id(node) in typed:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[path.name] = names
    return found


def test_the_core_imports_no_opentelemetry_sdk_module() -> None:
    """_core/ speaks the OpenTelemetry API only; the SDK is the export layer's business."""
    sdk = {
        name: sorted(m for m in modules if m.startswith("opentelemetry.sdk"))
        for name, modules in imported_modules("_core").items()
    }
    assert {name: mods for name, mods in sdk.items() if mods} == {}
    assert "engine.py" in sdk  # the walk saw the core


def test_the_statistics_import_nothing_but_themselves_the_base_and_the_standard_library() -> None:
    """_stats/ runs on the base alone: no OpenTelemetry, no layer above but one late import."""
    outside = {
        name: sorted(
            m
            for m in modules
            if m.startswith("opentelemetry")
            or (
                m.startswith("looptrace")
                and not m.startswith(("looptrace._stats", "looptrace._base"))
            )
        )
        for name, modules in imported_modules("_stats", typing=False).items()
    }
    # `Snapshot.diagnosis()` imports the layer above on its first call (docs/architecture.md)
    assert {name: mods for name, mods in outside.items() if mods} == {
        "snapshot.py": ["looptrace._diagnosis.diagnosis"]
    }
    assert "aggregator.py" in outside


def test_the_base_imports_nothing_of_looptrace() -> None:
    """_base/ is the bottom layer: the standard library only, so every layer may import it."""
    found = {
        name: sorted(m for m in modules if m.startswith(("looptrace", "opentelemetry")))
        for name, modules in imported_modules("_base").items()
    }
    assert {name: mods for name, mods in found.items() if mods} == {}
    assert "errors.py" in found


def test_the_diagnosis_imports_neither_the_core_nor_opentelemetry() -> None:
    """_diagnosis/ is a pure function of window data: statistics and the base, no hot path."""
    found = {
        name: sorted(
            m
            for m in modules
            if m.startswith("opentelemetry")
            or (
                m.startswith("looptrace")
                and not m.startswith(
                    ("looptrace._diagnosis", "looptrace._stats", "looptrace._base")
                )
            )
        )
        for name, modules in imported_modules("_diagnosis").items()
    }
    assert {name: mods for name, mods in found.items() if mods} == {}
    assert "diagnosis.py" in found
