"""collapsar.dashboard (folder dashboard/): the web page that watches and
controls a running experiment, and the small server that feeds it.

It owns the page (web/: sources, pinned npm dependencies, the esbuild step
that turns them into static assets in web/dist) and the aggregator
(`collapsar dashboard`), which follows one or several emulation managers'
status streams and serves them as one, in the same shape a single manager
serves (GET /stream, /status, /topology; POST /control/ACTION), so the page
works unchanged against a manager (`collapsar run --dashboard`) or the
aggregator.  The same build makes the report page's script and style
(web/src/report.js), which `collapsar report` inlines into one HTML file
(`report_assets`; the page around them is collapsar.report's).  It does
not own the status API itself (collapsar.manager.status.api) nor what the
control actions do (collapsar.manager.status.control).
"""

from __future__ import annotations

from pathlib import Path

from collapsar.errors import EnvironmentProblem

WEB = Path(__file__).resolve().parent / "web"


def assets_dir() -> Path:
    """The built page; a clear error if it was never built."""
    dist = WEB / "dist"
    missing = [name for name in ("index.html", "app.js", "app.css") if not (dist / name).is_file()]
    if missing:
        raise EnvironmentProblem(
            f"the dashboard page is not built ({dist / missing[0]} is missing)",
            f"run `npm ci && npm run build` in {WEB} (scripts/setup.sh test does it)",
        )
    return dist


def report_assets() -> tuple[str, str]:
    """The report page's script and style (`collapsar report` inlines them)."""
    dist = WEB / "dist"
    missing = [name for name in ("report.js", "report.css") if not (dist / name).is_file()]
    if missing:
        raise EnvironmentProblem(
            f"the report page is not built ({dist / missing[0]} is missing)",
            f"run `npm ci && npm run build` in {WEB} (scripts/setup.sh test does it)",
        )
    return (dist / "report.js").read_text(), (dist / "report.css").read_text()
