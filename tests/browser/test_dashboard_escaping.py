"""Names from a topology are shown as text, never run as markup.

Validation already refuses such names (first test); the page must not rely
on it, so a status server fed with hostile names (as a compromised or buggy
manager could send) serves the real built page to the real browser."""

import pytest

from collapsar.dashboard import assets_dir
from collapsar.errors import TopologyError
from collapsar.manager.status.api import StatusBoard, StatusServer
from collapsar.parser import parse_text

EVIL = "<img src=x onerror=alert(1)>"
EVIL2 = "<script>alert(2)</script>"


def test_validation_rejects_markup_in_names():
    with pytest.raises(TopologyError, match="not a valid name: use letters, digits"):
        parse_text(f"services:\n  '{EVIL}': {{command: [sleep, '1']}}\n")


@pytest.fixture(scope="module")
def hostile():
    board = StatusBoard()
    board.publish(
        {
            "run_id": EVIL2,
            "source": EVIL,
            "t_us": 2_000_000,
            "state": "running",
            "instances": [{"name": EVIL, "ip": EVIL2, "status": "up", "network": "up"}],
            "flows": [{"src": EVIL, "dst": EVIL2, "rate_bps": 1000, "bytes": 10, "configured_bps": 2000, "cut": False}],
            "links": [
                {
                    "id": 0,
                    "present": True,
                    "degraded": True,
                    "up": {
                        "rate_bps": 1000,
                        "load_bps": 500,
                        "utilisation": 0.5,
                        "delay_us": 0,
                        "jitter_us": 0,
                        "loss_ratio": 0,
                    },
                }
            ],
            "events": {
                "applied": [{"label": EVIL, "scheduled_us": 1, "lateness_us": 2, "error": EVIL2, "adhoc": True}],
                "pending": 1,
                "upcoming": [{"at_us": 3_000_000, "label": EVIL2}],
            },
        }
    )
    topology = {
        "nodes": [{"id": EVIL, "kind": "service", "instances": [EVIL]}, {"id": EVIL2, "kind": "bridge"}],
        "links": [{"id": 0, "a": EVIL, "b": EVIL2, "up": {"rate_bps": 1000}, "down": None}],
    }
    server = StatusServer(board, 0, topology=lambda: topology, assets=assets_dir()).start()
    yield f"http://127.0.0.1:{server.port}"
    board.close()
    server.stop()


def test_hostile_names_are_text(page, hostile, shots):
    page.goto(hostile + "/dashboard/")
    page.wait_js("window.collapsarDashboard && window.collapsarDashboard.renders > 0")
    assert page.locator("#instances tbody td").first.text_content() == EVIL
    assert page.locator("#flows tbody td").nth(1).text_content() == EVIL2
    assert EVIL in page.locator("#events").text_content()
    assert page.locator("#link-select option").first.text_content() == f"{EVIL} — {EVIL2}"
    # Nothing the names describe exists as an element, and nothing ran.
    assert page.locator("img").count() == 0 and page.locator("body script").count() == 1
    assert page.evaluate("window.collapsarDashboard.cy.nodes().map(n => n.data('name'))") == [EVIL, EVIL2]
    page.wait_for_timeout(300)
    assert page.problems == []
    page.screenshot(path=str(shots / "escaping.png"))
