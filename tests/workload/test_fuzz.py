"""A bounded libFuzzer run of the request decoder (the node's first line of
defence), seeded with valid requests from the independent Python encoder."""

import os
import subprocess

import wl_wire as wire
from wl_support import WORKLOAD


def seeds():
    c = wire.chain
    yield wire.request(c(wire.op_compute(1000)))
    yield wire.request(c(wire.op_io(wire.STORE, 4096, 100, flags=1), wire.op_io(wire.LOAD, 0, 10)), pad=20)
    yield wire.request(c(wire.op_forward([(7000, c(wire.op_compute(5))), (7001, c())], nack=1, retries=2)))
    yield wire.request(c(wire.op_forward([(7000, c(wire.op_forward([(7002, c())], nack=1)))], nack=1)))


def test_decoder_survives_bounded_fuzzing(tmp_path):
    build = subprocess.run(["make", "-C", str(WORKLOAD), "fuzz"], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(seeds()):
        (corpus / f"seed{i}").write_bytes(seed)
    run = subprocess.run(
        [
            str(WORKLOAD / "build" / "fuzz" / "fuzz_decode"),
            f"-max_total_time={os.environ.get('COLLAPSAR_FUZZ_S', '20')}",  # CI's share; longer by hand
            "-timeout=10",
            "-rss_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done" in run.stderr
    assert not list(tmp_path.glob("crash-*"))
