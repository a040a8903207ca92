"""A headless Chromium for the report tests: Debian's, driven by Playwright, never downloaded."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Any]:
    """Yield a launched headless Chromium (the system's); skip the test where there is none."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
            args=CHROMIUM_ARGS,
        )
        yield browser
        browser.close()


def offline_page(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    """Return a new page that may load `url` only, its console errors and warnings, its requests.

    Every other request is refused; the page's errors (uncaught exceptions included) and the
    URLs it asked for are collected in the two lists as they come.
    """
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda m: errors.append(m.text) if m.type in {"error", "warning"} else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.route(
        "**/*", lambda route: route.continue_() if route.request.url == url else route.abort()
    )
    return page, errors, requests
