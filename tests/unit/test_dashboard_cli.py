"""`collapsar dashboard` refuses bad input with one line, before serving."""

import pytest

from collapsar.cli import main


@pytest.mark.parametrize("argv, words", [
    (["--manager", "ftp://10.0.0.1:80"], "--manager ftp://10.0.0.1:80: expected a manager's status URL"),
    (["--manager", "http://127.0.0.1:1", "--port", "70000"], "--port 70000: expected 0 to 65535"),
    ([], "no --manager given and no local run is active on this host"),
    (["--manager", "http://a:1", "--manager", "http://b:2", "--manager", "http://c:3",
      "--token", "x", "--token", "y"], "give one token for all, or one per --manager"),
])
def test_bad_arguments(argv, words, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLLAPSAR_STATE_DIR", str(tmp_path))  # no local runs here
    monkeypatch.setattr("collapsar.dashboard.assets_dir", lambda: tmp_path)  # page not needed
    assert main(["dashboard", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_unbuilt_page_names_the_fix(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("collapsar.dashboard.WEB", tmp_path)
    assert main(["dashboard", "--manager", "http://127.0.0.1:1"]) == 3
    err = capsys.readouterr().err
    assert "dashboard page is not built" in err and "npm ci && npm run build" in err
