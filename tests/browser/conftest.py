"""Browser tier: Debian's Chromium, headless, driven by Playwright for Python.

The browser is always the system one (/usr/bin/chromium from the `chromium`
package, deps/apt-dashboard.txt); Playwright never downloads one.  The page
must be built (dashboard/web/dist: `npm ci && npm run build`, which
scripts/setup.sh test does).  Screenshots go to artifacts/browser/."""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "browser"
# The local-run helpers (real `collapsar` subprocess, host snapshots) live with the kernel tier.
sys.path.insert(0, str(ROOT / "tests" / "kernel"))


@pytest.fixture(scope="session")
def browser():
    from collapsar.dashboard import assets_dir

    assets_dir()  # a clear error if the page was never built
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (deps/apt-dashboard.txt), "
            "or set COLLAPSAR_SKIP_BROWSER=1"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: the tier runs as root (it starts real runs), where
        # Chromium's sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def shots() -> pathlib.Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


@pytest.fixture(scope="module")
def page(browser):
    """One page per module; `page.problems` collects uncaught errors and
    dialogs (an alert would mean a name from a topology ran as script)."""
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    page = context.new_page()
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: (page.problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.wait_js = lambda expression, timeout_s=10.0: wait_js(page, expression, timeout_s)
    yield page
    context.close()


def wait_js(page, expression: str, timeout_s: float):
    """Poll `expression` until truthy and return its value.  (Playwright's
    wait_for_function evaluates strings with eval, which the page's
    Content-Security-Policy forbids; evaluate() is not subject to it.)"""
    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {expression}")
        time.sleep(0.03)
