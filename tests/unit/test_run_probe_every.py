"""`collapsar run --probe-every`: a bad interval is one line and exit 1 (as every bad option of run),
before anything is made (the check comes before root is needed)."""

import pytest

from collapsar.cli import main
from collapsar.commands.run import _probe_every_us


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fast", "collapsar: --probe-every fast: "),
        ("5ms", "collapsar: --probe-every 5ms: expected an interval from 10ms to 60s"),
        ("2min", "collapsar: --probe-every 2min: expected an interval from 10ms to 60s"),
    ],
)
def test_a_bad_interval_is_one_line(value, message, tmp_path, capsys):
    topology = tmp_path / "t.yaml"
    topology.write_text("experiment: {name: t}\nservices:\n  a: {command: [sleep, '1']}\n")
    assert main(["run", str(topology), "--probe-every", value]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(message), line
    assert captured.out == ""


def test_the_interval_in_microseconds():
    assert (_probe_every_us(None), _probe_every_us("200ms"), _probe_every_us("10ms"), _probe_every_us("60s")) == (
        0,
        200_000,
        10_000,
        60_000_000,
    )
