"""The package's layers (DESIGN.md "Layout"): what the hot path and the statistics may import."""

from __future__ import annotations

import ast
from pathlib import Path

import looptrace

PACKAGE = Path(looptrace.__file__).parent


def imported_modules(layer: str) -> dict[str, set[str]]:
    """Return every module each file of a layer imports, by file name."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / layer).glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


def test_the_statistics_import_nothing_but_themselves_and_the_standard_library() -> None:
    """_stats/ is the bottom layer: no OpenTelemetry and no other looptrace layer."""
    outside = {
        name: sorted(
            m
            for m in modules
            if m.startswith("opentelemetry")
            or (m.startswith("looptrace") and not m.startswith("looptrace._stats"))
        )
        for name, modules in imported_modules("_stats").items()
    }
    assert {name: mods for name, mods in outside.items() if mods} == {}
    assert "aggregator.py" in outside
