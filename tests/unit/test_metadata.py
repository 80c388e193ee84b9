"""The metadata codec: exact bytes, strict rejection, fuzzing, send policy, expiry.

Run as a script (`python tests/unit/test_metadata.py -runs=N`) it is an atheris
fuzz target for the decoder; `test_atheris_fuzz` does that for a bounded run."""

import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collapsar.manager.metadata import (
    HEADER, Codec, FlowReport, Inbox, MalformedMessage, Message, MetadataError, PeerFlows, SendPolicy,
)

TAG = 0xC0FFEE01


def codec(links=40):
    return Codec(TAG, links)


def sample():
    return Message(7, 42, (FlowReport((1, 2, 3), 20_000_000), FlowReport((5,), 1_500_000)))


def test_exact_bytes_narrow_ids():
    data = codec().encode(sample())
    assert data.hex() == (
        "4358" "02" "00" "c0ffee01" "0007" "0000002a" "0002"  # magic, version, flags, tag, sender, seq, count
        "00004e20" "03" "010203"                             # 20000 kbit/s over links 1, 2, 3
        "000005dc" "01" "05")                                # 1500 kbit/s over link 5
    assert len(data) == 16 + 8 + 6


def test_exact_bytes_wide_ids():
    data = codec(links=300).encode(Message(1, 0, (FlowReport((299, 7), 1000),)))
    assert data.hex() == "4358" "02" "01" "c0ffee01" "0001" "00000000" "0001" "00000001" "02" "012b" "0007"


def test_round_trip_and_size():
    c = codec()
    data = c.encode(sample())
    assert c.decode(data) == sample()
    assert c.encoded_size(sample().flows) == len(data)


def test_saturated_flag_rides_in_the_top_bit_of_the_path_byte():
    c = codec()
    data = c.encode(Message(2, 3, (FlowReport((4, 5), 8_000, saturated=True), FlowReport((6,), 8_000))))
    assert data[16 + 4] == 0x82 and data[16 + 7 + 4] == 0x01
    assert [f.saturated for f in c.decode(data).flows] == [True, False]
    with pytest.raises(MetadataError, match="a flow crosses 1..127 links, got 128"):
        Codec(TAG, 300).encode(Message(1, 0, (FlowReport(tuple(range(128)), 1),)))


def test_rates_travel_in_whole_kbit_per_second():
    c = codec()
    decoded = c.decode(c.encode(Message(1, 1, (FlowReport((0,), 1_499), FlowReport((1,), 1_500)))))
    assert [f.rate_bps for f in decoded.flows] == [1_000, 2_000]


def test_sequence_wraps_at_32_bits():
    c = codec()
    assert c.decode(c.encode(Message(1, (1 << 32) + 5, ()))).sequence == 5


@pytest.mark.parametrize("message,text", [
    (Message(70000, 0, ()), "sender_id must fit in 16 bits, got 70000"),
    (Message(1, 0, (FlowReport((), 1),)), "a flow crosses 1..127 links, got 0"),
    (Message(1, 0, (FlowReport((40,), 1),)), "link id 40 outside 0..39"),
    (Message(1, 0, (FlowReport((3, 4, 3), 1),)), r"a path crosses each link once, got link ids \(3, 4, 3\)"),
    (Message(1, 0, (FlowReport((1,), 1 << 45),)), "does not fit in 32 bits of kbit/s"),
    (Message(1, 0, (FlowReport((1,), -1000),)), "does not fit in 32 bits of kbit/s"),
])
def test_encoder_rejects_out_of_range(message, text):
    with pytest.raises(MetadataError, match=text):
        codec().encode(message)


def _good():
    return bytearray(codec().encode(sample()))


def _patched(offset, fmt, value):
    data = _good()
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


REJECTS = [
    (b"", "short"),
    (bytes(_good()[:15]), "short"),
    (_patched(0, ">2s", b"XX"), "foreign"),
    (_patched(4, ">I", 0xDEADBEEF), "foreign"),
    (_patched(2, ">B", 1), "version"),
    (_patched(3, ">B", 0x80), "flags"),
    (_patched(3, ">B", 0x01), "flags"),          # wide ids in a 40-link topology
    (_patched(14, ">H", 3), "truncated"),        # claims a third flow
    (_patched(14, ">H", 1), "trailing"),         # hides the second flow
    (_patched(20, ">B", 0), "empty-path"),
    (_patched(20, ">B", 15), "truncated"),
    (_patched(21, ">B", 40), "link-id"),
    (_patched(21, ">B", 2), "repeated-link"),
    (bytes(_good()) + b"\x00", "trailing"),
    (bytes(_good()[:-1]), "truncated"),
]


@pytest.mark.parametrize("data,reason", REJECTS, ids=[f"{i}-{r}" for i, (_, r) in enumerate(REJECTS)])
def test_decoder_rejects_with_reason(data, reason):
    with pytest.raises(MalformedMessage) as caught:
        codec().decode(data)
    assert caught.value.reason == reason
    inbox = Inbox(codec())
    assert inbox.accept(data) is None
    assert inbox.dropped == {reason: 1} and inbox.accepted == 0


def test_inbox_drops_own_duplicates_and_late_but_accepts_a_restarted_sender():
    c = codec()
    inbox = Inbox(c, own_sender_ids=[3])
    assert inbox.accept(c.encode(Message(3, 1, ()))) is None
    assert inbox.accept(c.encode(Message(9, 100, ()))).sequence == 100
    assert inbox.accept(c.encode(Message(9, 100, ()))) is None     # duplicate
    assert inbox.accept(c.encode(Message(9, 99, ()))) is None      # late
    assert inbox.accept(c.encode(Message(9, 101, ()))).sequence == 101
    assert inbox.accept(c.encode(Message(9, 7_000_000, ()))).sequence == 7_000_000  # restarted elsewhere
    assert inbox.accept(c.encode(Message(9, 0xFFFF_FFF0, ()))).sequence == 0xFFFF_FFF0
    assert inbox.accept(c.encode(Message(9, 5, ()))).sequence == 5  # wrapped forward
    assert inbox.accept(c.encode(Message(9, 0xFFFF_FFFF, ()))) is None  # late, across the wrap
    assert inbox.dropped == {"own": 1, "stale": 3}
    assert inbox.accepted == 5


# ---- fuzzing ---------------------------------------------------------------

flows_strategy = st.lists(st.builds(
    FlowReport,
    st.lists(st.integers(0, 299), min_size=1, max_size=8, unique=True).map(tuple),
    st.integers(0, 4_000_000_000).map(lambda kbps: kbps * 1000), st.booleans()), max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 65535), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF_FFFF), flows_strategy)
def test_round_trip_any_message(links, sender, sequence, flows):
    c = Codec(TAG, links)
    flows = [FlowReport(tuple(dict.fromkeys(i % links for i in f.link_ids)), f.rate_bps, f.saturated)
             for f in flows]  # ids folded into range, repeats dropped: a path crosses a link once
    message = Message(sender, sequence, tuple(flows))
    data = c.encode(message)
    assert c.decode(data) == message
    assert len(data) == 16 + sum(5 + c.id_size * len(f.link_ids) for f in flows)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data):
    inbox = Inbox(codec())
    result = inbox.accept(data)
    assert (result is None) == (sum(inbox.dropped.values()) == 1)


def test_every_single_byte_mutation_and_truncation_decodes_or_drops():
    # 30 offsets x 256 values x 4 truncations: small enough to try them all.
    good = _good()
    decoded = 0
    for offset in range(len(good)):
        for value in range(256):
            data = bytearray(good)
            data[offset] = value
            for cut in range(4):
                candidate = bytes(data[:len(data) - cut])
                try:
                    message = codec().decode(candidate)
                except MalformedMessage:
                    continue
                decoded += 1
                # What still decodes re-encodes to the very same bytes: nothing was guessed.
                assert codec().encode(message) == candidate
    # Exactly these decode: any value in the sender, sequence and both rates
    # (2 + 4 + 4 + 4 bytes x 256), an in-range id in the 4 link bytes (40 for
    # the one-link flow, 38 for each id of the three-link flow: no repeats),
    # the unchanged value of the 12 other bytes (magic, version, flags, tag,
    # flow count, path lengths), and the saturated bit set in either path
    # byte (2); no truncation ever does.
    assert decoded == (2 + 4 + 4 + 4) * 256 + 40 + 3 * 38 + 12 + 2


def fuzz_one(data: bytes) -> None:
    """The atheris target: anything but MalformedMessage escaping is a bug."""
    try:
        message = codec().decode(data)
    except MalformedMessage:
        return
    assert codec().encode(message) == data


def test_atheris_fuzz():
    pytest.importorskip("atheris", reason="atheris==3.0.0 is the optional coverage-guided fuzzer")
    run = subprocess.run([sys.executable, __file__, "-runs=30000", "-seed=1", "-max_len=256"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 30000 runs" in run.stderr


# ---- send policy and expiry -------------------------------------------------

def test_send_on_change_plus_heartbeat():
    policy = SendPolicy(heartbeat_periods=4, change_ratio=0.05)
    steady = {(1, 2): 10_000_000}
    sent = [p for p in range(12) if policy.should_send(steady, p)]
    assert sent == [0, 4, 8]                                          # heartbeats only
    assert policy.should_send({(1, 2): 10_400_000}, 9) is False       # 4% move: no
    assert policy.should_send({(1, 2): 10_600_000}, 10) is True       # 6% move: send
    assert policy.should_send({(1, 2): 10_600_000, (3,): 1}, 11) is True  # new flow
    assert policy.should_send({(1, 2): 10_600_000}, 12) is True       # flow ended
    assert policy.should_send({(1, 2): 10_600_000}, 13) is False


def test_peer_flows_expire_after_silence():
    peers = PeerFlows(expiry_periods=12)
    peers.update(Message(4, 1, (FlowReport((1,), 1000),)), period=10)
    peers.update(Message(5, 1, ()), period=15)
    assert peers.expire(21) == []
    assert peers.expire(22) == [4]
    assert peers.flows() == {5: ()}


@pytest.mark.parametrize("make,text", [
    (lambda: Codec(1 << 32, 10), "experiment_tag must fit in 32 bits"),
    (lambda: Codec(1, 0), "link_count must be 1..65535, got 0"),
    (lambda: SendPolicy(heartbeat_periods=0), "heartbeat_periods must be at least 1"),
    (lambda: SendPolicy(change_ratio=1.0), r"change_ratio must lie in \[0, 1\)"),
    (lambda: PeerFlows(expiry_periods=0), "expiry_periods must be at least 1"),
])
def test_bad_settings(make, text):
    with pytest.raises(MetadataError, match=text):
        make()


def test_header_is_sixteen_bytes():
    assert HEADER.size == 16


if __name__ == "__main__":
    import atheris

    import collapsar.manager.metadata as metadata

    # Coverage guidance on the decoder only: instrumenting everything loaded is slow.
    metadata.Codec.decode = atheris.instrument_func(metadata.Codec.decode)
    atheris.Setup(sys.argv, lambda data: fuzz_one(bytes(data)))
    atheris.Fuzz()
