"""Fuzzing the metadata codec: any message round-trips (hypothesis), random
bytes never crash the inbox, and every single-byte mutation and truncation
of a message is dropped with the expected reasons.

Run as a script (`python tests/unit/test_metadata_fuzz.py -runs=N`) it is an
atheris fuzz target for the decoder; `test_atheris_fuzz` does that for a
bounded run."""

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_support import KEY, TAG, codec, sample

from collapsar.manager.sharing.metadata import Codec, FlowReport, Inbox, MalformedMessage, Message

flows_strategy = st.lists(
    st.builds(
        FlowReport,
        st.lists(st.integers(0, 299), min_size=1, max_size=8, unique=True).map(tuple),
        st.integers(0, 4_000_000_000).map(lambda kbps: kbps * 1000),
        st.booleans(),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 65535),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFFFF_FFFF),
    flows_strategy,
)
def test_round_trip_any_message(links, sender, sequence, epoch, flows):
    c = Codec(TAG, links, instances=0x10000, key=KEY)
    flows = [
        FlowReport(tuple(dict.fromkeys(i % links for i in f.link_ids)), f.rate_bps, f.saturated) for f in flows
    ]  # ids folded into range, repeats dropped: a path crosses a link once
    message = Message(sender, sequence, tuple(flows), epoch)
    data = c.encode(message)
    assert c.decode(data) == message
    assert len(data) == 20 + sum(5 + c.id_size * len(f.link_ids) for f in flows) + 16


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data):
    inbox = Inbox(codec())
    result = inbox.accept(data)
    assert result is None and sum(inbox.dropped.values()) == 1


def test_every_single_byte_mutation_and_truncation_is_dropped():
    # 50 offsets x 256 values x 4 truncations: small enough to try them all.
    good = codec().encode(sample())
    reasons = {}
    for offset in range(len(good)):
        for value in range(256):
            data = bytearray(good)
            data[offset] = value
            for cut in range(4):
                candidate = bytes(data[: len(data) - cut])
                try:
                    codec().decode(candidate)
                except MalformedMessage as error:
                    reasons[error.reason] = reasons.get(error.reason, 0) + 1
                    continue
                assert candidate == good  # only the message itself decodes
    # The 8-byte prefix says whether the message is for us (foreign, version);
    # every other change, and every truncation, fails the tag.
    assert set(reasons) == {"foreign", "version", "forged"}
    assert reasons["version"] == 255 * 4 and reasons["foreign"] == (2 + 4) * 255 * 4
    assert sum(reasons.values()) == len(good) * 256 * 4 - len(good)


def fuzz_one(data: bytes) -> None:
    """The atheris target: anything but MalformedMessage escaping is a bug."""
    try:
        message = codec().decode(data)
    except MalformedMessage:
        return
    assert codec().encode(message) == data


def test_atheris_fuzz():
    pytest.importorskip("atheris", reason="atheris==3.0.0 is the optional coverage-guided fuzzer")
    run = subprocess.run(
        [sys.executable, __file__, "-runs=30000", "-seed=1", "-max_len=256"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 30000 runs" in run.stderr


if __name__ == "__main__":
    import atheris

    import collapsar.manager.sharing.metadata as metadata

    # Coverage guidance on the decoder only: instrumenting everything loaded is slow.
    metadata.Codec.decode = atheris.instrument_func(metadata.Codec.decode)
    atheris.Setup(sys.argv, lambda data: fuzz_one(bytes(data)))
    atheris.Fuzz()
