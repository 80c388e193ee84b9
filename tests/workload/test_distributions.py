"""Value specs: distribution means, spreads and bounds over many samples
with a fixed seed (wl-client --sample draws exactly what requests draw),
reproducibility, and rejection of bad specs."""

import json
import math
import subprocess

import pytest
from wl_support import sanitizer_env

N = 200_000


def sample(binaries, spec, seed=7, n=N):
    out = subprocess.run(
        [str(binaries["client"]), "--sample", spec, "-n", str(n), "--seed", str(seed)],
        capture_output=True,
        text=True,
        env=sanitizer_env(),
        check=True,
    )
    return json.loads(out.stdout)


def trunc_exp_mean(avg, hi):
    """Mean of an exponential(mean avg) conditioned on x <= hi."""
    q = math.exp(-hi / avg)
    return avg - hi * q / (1 - q)


@pytest.mark.parametrize(
    "spec, mean, std, lo, hi",
    [
        ("unif:min=10,max=20", 15.0, 10 / math.sqrt(12), 10, 20),
        ("unif,min=1k,max=10k", 5500.0, 9000 / math.sqrt(12), 1000, 10000),  # ',' as separator, k suffix
        ("exp:avg=5", 5.0, 5.0, 0, math.inf),
        ("exp:avg=5,max=20", trunc_exp_mean(5, 20), None, 0, 20),
        ("norm:avg=100,std=10", 100.0, 10.0, 0, math.inf),
        ("norm:avg=100,std=10,min=95,max=105", 100.0, None, 95, 105),
        ("lognorm:avg=5,std=2", 5.0, 2.0, 0, math.inf),
        ("gamma:avg=5,std=2", 5.0, 2.0, 0, math.inf),
        ("gamma:avg=0.5,std=1", 0.5, 1.0, 0, math.inf),  # shape 0.25 < 1 takes the boosted path
        ("gamma:avg=5,std=2,min=3,max=6", None, None, 3, 6),
    ],
)
def test_distribution_moments_and_bounds(binaries, spec, mean, std, lo, hi):
    got = sample(binaries, spec)
    assert got["count"] == N
    assert got["min"] >= lo and got["max"] <= hi
    if mean is not None:
        assert got["mean"] == pytest.approx(mean, rel=0.015)
    if std is not None:
        assert got["std"] == pytest.approx(std, rel=0.03)
    if hi < math.inf and lo > 0:
        assert got["max"] - got["min"] > 0.9 * (hi - lo)  # truncation fills the range, not a clamp spike


def test_sequences_cycle_through_their_terms(binaries):
    assert sample(binaries, "aseq:min=0,max=10,step=2", n=600) == {
        "count": 600,
        "mean": 5.0,
        "std": pytest.approx(math.sqrt(35 / 3), rel=1e-6),
        "min": 0.0,
        "max": 10.0,
    }
    got = sample(binaries, "gseq:min=1,max=1000,step=10", n=400)
    assert (got["mean"], got["min"], got["max"]) == (277.75, 1.0, 1000.0)


def test_trace_file_column(binaries, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("t,size\n0,100\n1,300\n2,200\n")
    got = sample(binaries, f"file:path={trace},col=2", n=300)
    assert (got["mean"], got["min"], got["max"]) == (200.0, 100.0, 300.0)


def test_seed_makes_runs_reproducible(binaries):
    spec = "exp:avg=5"
    assert sample(binaries, spec, seed=3) == sample(binaries, spec, seed=3)
    assert sample(binaries, spec, seed=3)["mean"] != sample(binaries, spec, seed=4)["mean"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sample", "unif:min=5"], "unif needs min= and max="),
        (["--sample", "exp:avg=-1"], "exp needs avg= > 0"),
        (["--sample", "norm:avg=1"], "needs avg= > 0 and std= > 0"),
        (["--sample", "unif:min=5,max=1"], "min is above max"),
        # A falling step from min= below max= is DistWalk's ramp-down (test_distwalk_cli.py);
        # min= above max= with a rising step goes nowhere.
        (["--sample", "aseq:min=10,max=1,step=1"], "step moves away from max"),
        (["--sample", "bogus:min=1"], "is not a count"),
        (["-C", "10xs"], "unknown suffix 'xs'"),
        (["-S", "10k,sometimes"], "unexpected word 'sometimes'"),
        (["-F", "127.0.0.1:1,127.0.0.1:2,3"], "nack 3 is above the 2 targets"),
        (["--to", "nosuchhost.invalid"], "cannot resolve 'nosuchhost.invalid'"),
        (["-n", "2", "--ns", "3"], "--ns 3 is above -n 2"),
    ],
)
def test_bad_specs_are_rejected_with_a_reason(binaries, args, message):
    out = subprocess.run([str(binaries["client"]), *args], capture_output=True, text=True, env=sanitizer_env())
    assert out.returncode == 2
    assert message in out.stderr


def test_compute_distribution_reaches_the_node(start_node, run_client, tmp_path):
    node = start_node()
    res = run_client("--to", node.addr, "-C", "unif:min=1ms,max=3ms", "-n", 100, "--seed", 5)
    assert res["ok"] == 100
    assert res.lat["min"] >= 1000
    assert res.lat["p90"] >= 2500  # the upper tail of the draws shows up in the latencies
