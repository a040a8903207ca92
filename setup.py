"""Build looptrace, compiling its hot path (`_core/`, `_stats/`) with mypyc where it can.

`pip install .` (any wheel build) compiles those packages to C extensions and installs their
`.py` sources beside them. Without a working C compiler, with `LOOPTRACE_PURE_PYTHON=1` (set,
not "0"), or for an editable install (`pip install -e .`, so that edits take effect at once),
nothing is compiled and the same modules run as pure Python: identical behaviour, a higher cost
per section (docs/performance.md). A compiled installation runs the pure-Python modules too
when `LOOPTRACE_PURE_PYTHON=1` is set as looptrace is imported (`_core/build.py`).
`looptrace --version` says which core runs.
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _declared(name: str) -> Any:
    """Return the literal value `name` is given in `src/looptrace/_core/compiled.py`.

    Read from the file's text: a build cannot import the package it builds.
    """
    source = HERE / "src" / "looptrace" / "_core" / "compiled.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return ast.literal_eval(node.value)
    raise LookupError(f"{source} declares no {name}")


# The modules of the hot path, declared once in the package (`_core/compiled.py`), as paths.
COMPILED = [f"src/{name.replace('.', '/')}.py" for name in _declared("COMPILED")]
# Code generation for a shared library whose functions no other library replaces: without these,
# every call between two compiled functions goes through the library's procedure linkage table
# (an indirect jump, and no inlining), and the hot path's code spreads over more instruction-cache
# lines. Each function also starts on a cache line of its own: a timer call runs a handful of
# them beside the interpreter's loop, and where they start otherwise moves with every change to
# any compiled module (one which only grew `Engine.start` took a `with` block from 24 to 34
# instruction-cache misses, 1.15x to 1.35x the floor; aligned, 19). Used where the C compiler
# accepts them (GCC, Clang).
DIRECT_CALLS = ["-fno-semantic-interposition", "-fno-plt", "-falign-functions=64"]
# Commands that build a wheel or install one; metadata and editable builds compile nothing.
BUILDS = {"bdist_wheel", "build", "build_ext", "install"}


def _extensions() -> list[object]:
    pure = os.environ.get("LOOPTRACE_PURE_PYTHON", "").strip() not in {"", "0"}
    if pure or not BUILDS.intersection(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        print(f"looptrace: mypyc unavailable ({error}); installing the pure-Python core")
        return []
    # The compiled modules' imports are followed silently: the modules of the extras they reach
    # import packages that a build environment lacks (exporters, torch), typed as Any here.
    options = ["--follow-imports=silent", "--ignore-missing-imports"]
    try:
        built = mypycify(
            [*options, *COMPILED], opt_level="3", debug_level="0", group_name="looptrace"
        )
    except (Exception, SystemExit) as error:  # mypyc exits when it cannot type the core
        print(f"looptrace: mypyc failed ({error!r}); installing the pure-Python core")
        return []
    # What the compiled core asks on every timer call, which mypyc cannot say: which thread.
    name = _declared("C_HELPER")
    helper = Extension(name, [f"src/{name.replace('.', '/')}.c"])
    return [*built, helper]


class OptionalBuildExt(build_ext):
    """Compile the extensions; if the C toolchain fails, install the pure-Python core instead."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # no compiler, missing headers: the .py modules still work
            self._fall_back(error)

    def build_extensions(self) -> None:
        """Compile every extension, with the `DIRECT_CALLS` flags where the compiler takes them."""
        flags = self._accepted(DIRECT_CALLS)
        for extension in self.extensions:
            extension.extra_compile_args = [*extension.extra_compile_args, *flags]
        super().build_extensions()

    def _accepted(self, flags: list[str]) -> list[str]:
        """Return `flags` if the C compiler compiles a file with them, else none of them."""
        if self.compiler.compiler_type != "unix":
            return []
        with tempfile.TemporaryDirectory() as folder:
            probe = Path(folder, "probe.c")
            probe.write_text("int looptrace_probe(void) { return 0; }\n")
            try:
                self.compiler.compile([str(probe)], output_dir=folder, extra_postargs=flags)
            except Exception:  # CompileError, or a compiler that is missing altogether
                return []
        return flags

    def _fall_back(self, error: Exception) -> None:
        print(f"looptrace: compiling the core failed ({error}); installing the pure-Python core")
        for extension in self.extensions:
            built = Path(self.get_ext_fullpath(extension.name))
            built.unlink(missing_ok=True)  # a partial build must not shadow the .py modules
        self.extensions = []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
