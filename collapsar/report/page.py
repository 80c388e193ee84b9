"""The report as one self-contained HTML file: the figures as a JSON data
block, the bundled page script and style inline (collapsar.dashboard builds
them from dashboard/web/src/report.js), and a Content-Security-Policy that
lets the page run that one script and load nothing at all: opened from a
mail attachment or an air-gapped laptop, it makes no request.

Nothing from the run becomes markup: the data block is JSON with every `<`,
`>` and `&` escaped (so no `</script>` in an experiment's comments ends it),
and the script puts text on the page through textContent only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

from collapsar.errors import EnvironmentProblem

_CLOSES = re.compile(r"</(script|style)|<!--", re.IGNORECASE)


def _safe_json(value: object) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _inline(code: str, what: str) -> str:
    if _CLOSES.search(code):
        raise EnvironmentProblem(
            f"the built report {what} contains a sequence that would end its inline element",
            "rebuild the dashboard page (`npm ci && npm run build` in dashboard/web) and report this",
        )
    return code


def render(figures: dict, script: str, style: str) -> str:
    """The HTML of a report of `figures` (collapsar.report.figures.build)."""
    script = _inline(script, "script")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:"
    run = figures.get("run") or {}
    name = run.get("experiment") or run.get("run_id") or figures.get("experiment") or "a set of runs"
    title = html.escape(f"Collapsar report: {name}")
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n"
        f"<style>{_inline(style, 'style')}</style>\n"
        "</head>\n<body>\n"
        f'<header><h1 id="title">{title}</h1></header>\n'
        '<div id="parts"></div>\n'
        f'<script type="application/json" id="report-data">{_safe_json(figures)}</script>\n'
        f"<script>{script}</script>\n"
        "</body>\n</html>\n"
    )
