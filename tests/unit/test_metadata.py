"""The metadata codec: exact bytes, authentication, strict rejection, replay,
fuzzing, send policy, expiry.  (Which flows a sender may report, and the
bus's caps: test_metadata_routes.py.)

Run as a script (`python tests/unit/test_metadata.py -runs=N`) it is an atheris
fuzz target for the decoder; `test_atheris_fuzz` does that for a bounded run."""

import hashlib
import hmac
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collapsar.manager.sharing.metadata import (
    HEADER,
    TAG_BYTES,
    Codec,
    FlowReport,
    Inbox,
    MalformedMessage,
    Message,
    MetadataError,
    PeerFlows,
    SendPolicy,
)

TAG = 0xC0FFEE01
KEY = bytes(range(32))
INSTANCES = 12


def codec(links=40, key=KEY, instances=INSTANCES):
    return Codec(TAG, links, instances=instances, key=key)


def expected_tag(body: bytes, key=KEY) -> bytes:
    """The tag as the README's trust model states it, computed here on its own."""
    message_key = hmac.new(key, b"collapsar flow metadata v3", hashlib.sha256).digest()
    return hmac.new(message_key, body, hashlib.sha256).digest()[:16]


def sample():
    return Message(7, 42, (FlowReport((1, 2, 3), 20_000_000), FlowReport((5,), 1_500_000)), epoch=0xA1B2C3D4)


def test_exact_bytes_narrow_ids():
    data = codec().encode(sample())
    body = bytes.fromhex(
        "4358"
        "03"
        "00"
        "c0ffee01"
        "0007"
        "a1b2c3d4"
        "0000002a"
        "0002"  # magic, version, flags, tag, sender,
        #                                                                   epoch, sequence, count
        "00004e20"
        "03"
        "010203"  # 20000 kbit/s over links 1, 2, 3
        "000005dc"
        "01"
        "05"
    )  # 1500 kbit/s over link 5
    assert data == body + expected_tag(body)
    assert len(data) == 20 + 8 + 6 + 16  # 20 bytes more than version 2: the epoch and the tag


def test_exact_bytes_wide_ids():
    data = codec(links=300).encode(Message(1, 0, (FlowReport((299, 7), 1000),)))
    body = bytes.fromhex("43580301c0ffee010001000000000000000000010000000102012b0007")
    assert data == body + expected_tag(body)


def test_round_trip_and_size():
    c = codec()
    data = c.encode(sample())
    assert c.decode(data) == sample()
    assert c.encoded_size(sample().flows) == len(data)


def test_saturated_flag_rides_in_the_top_bit_of_the_path_byte():
    c = codec()
    data = c.encode(Message(2, 3, (FlowReport((4, 5), 8_000, saturated=True), FlowReport((6,), 8_000))))
    assert data[20 + 4] == 0x82 and data[20 + 7 + 4] == 0x01
    assert [f.saturated for f in c.decode(data).flows] == [True, False]
    with pytest.raises(MetadataError, match="a flow crosses 1..127 links, got 128"):
        codec(links=300).encode(Message(1, 0, (FlowReport(tuple(range(128)), 1),)))


def test_rates_travel_in_whole_kbit_per_second():
    c = codec()
    decoded = c.decode(c.encode(Message(1, 1, (FlowReport((0,), 1_499), FlowReport((1,), 1_500)))))
    assert [f.rate_bps for f in decoded.flows] == [1_000, 2_000]


def test_sequence_wraps_at_32_bits():
    c = codec()
    assert c.decode(c.encode(Message(1, (1 << 32) + 5, ()))).sequence == 5


@pytest.mark.parametrize(
    "message,text",
    [
        (Message(12, 0, ()), "sender_id must be 0..11, got 12"),
        (Message(1, 0, (FlowReport((1,), 1),) * 12), "at most 11 flows per message, got 12"),
        (Message(1, 0, (), epoch=1 << 32), "epoch must fit in 32 bits"),
        (Message(1, 0, (FlowReport((), 1),)), "a flow crosses 1..127 links, got 0"),
        (Message(1, 0, (FlowReport((40,), 1),)), "link id 40 outside 0..39"),
        (Message(1, 0, (FlowReport((3, 4, 3), 1),)), r"a path crosses each link once, got link ids \(3, 4, 3\)"),
        (Message(1, 0, (FlowReport((1,), 1 << 45),)), "does not fit in 32 bits of kbit/s"),
        (Message(1, 0, (FlowReport((1,), -1000),)), "does not fit in 32 bits of kbit/s"),
    ],
)
def test_encoder_rejects_out_of_range(message, text):
    with pytest.raises(MetadataError, match=text):
        codec().encode(message)


# ---- authentication ----------------------------------------------------------


def test_a_message_under_another_key_is_forged():
    data = codec(key=b"another run's key, 32 bytes long").encode(sample())
    inbox = Inbox(codec())
    assert inbox.accept(data) is None
    assert inbox.dropped == {"forged": 1} and inbox.accepted == 0


def test_a_version_2_message_without_a_tag_is_refused_by_version():
    v2 = bytes.fromhex("43580200c0ffee0100070000002a000100004e200101")
    with pytest.raises(MalformedMessage) as caught:
        codec().decode(v2)
    assert caught.value.reason == "version"


def test_every_bit_of_body_and_tag_is_covered():
    # Past the 8-byte prefix (magic, version, experiment tag: is it for us at
    # all) a flipped bit anywhere, header, records or tag, fails the tag.
    good = codec().encode(sample())
    for offset in range(8, len(good)):
        for bit in range(8):
            data = bytearray(good)
            data[offset] ^= 1 << bit
            with pytest.raises(MalformedMessage) as caught:
                codec().decode(bytes(data))
            assert caught.value.reason == "forged", (offset, bit)


@pytest.mark.parametrize("text", [b"", b"short", b"\x00" * 15])
def test_keys_shorter_than_16_bytes_are_refused(text):
    with pytest.raises(MetadataError, match="the metadata key must be at least 16 bytes"):
        codec(key=text)


# ---- strict rejection of authentic but wrong messages (a manager's bug) -----


def _good():
    return bytearray(codec().encode(sample())[:-TAG_BYTES])


def _signed(body) -> bytes:
    """`body` with the right tag: only a holder of the key can send it."""
    return bytes(body) + expected_tag(bytes(body))


def _patched(offset, fmt, value):
    data = _good()
    struct.pack_into(fmt, data, offset, value)
    return _signed(data)


REJECTS = [
    (b"", "short"),
    (b"CX\x03\x00\xc0\xff", "short"),
    (bytes(codec().encode(sample())[:35]), "short"),
    (_patched(0, ">2s", b"XX"), "foreign"),
    (_patched(4, ">I", 0xDEADBEEF), "foreign"),
    (_patched(2, ">B", 2), "version"),
    (_patched(3, ">B", 0x80), "flags"),
    (_patched(3, ">B", 0x01), "flags"),  # wide ids in a 40-link topology
    (_patched(8, ">H", INSTANCES), "sender"),  # no such instance
    (_patched(8, ">H", 0xFFFF), "sender"),
    (_patched(18, ">H", INSTANCES), "flows"),  # more flows than other instances
    (_patched(18, ">H", 3), "truncated"),  # claims a third flow
    (_patched(18, ">H", 1), "trailing"),  # hides the second flow
    (_patched(24, ">B", 0), "empty-path"),
    (_patched(24, ">B", 15), "truncated"),
    (_patched(25, ">B", 40), "link-id"),
    (_patched(25, ">B", 2), "repeated-link"),
    (_signed(_good() + b"\x00"), "trailing"),
    (_signed(_good()[:-1]), "truncated"),
    (bytes(_good()) + bytes(16), "forged"),
]


@pytest.mark.parametrize("data,reason", REJECTS, ids=[f"{i}-{r}" for i, (_, r) in enumerate(REJECTS)])
def test_decoder_rejects_with_reason(data, reason):
    with pytest.raises(MalformedMessage) as caught:
        codec().decode(data)
    assert caught.value.reason == reason
    inbox = Inbox(codec())
    assert inbox.accept(data) is None
    assert inbox.dropped == {reason: 1} and inbox.accepted == 0


# ---- own, duplicates, replays, sessions --------------------------------------


def test_inbox_drops_own_duplicates_and_late_messages():
    c = codec()
    inbox = Inbox(c, own_sender_ids=[3])
    assert inbox.accept(c.encode(Message(3, 1, ()))) is None  # ours, back over IPC
    assert inbox.accept(c.encode(Message(9, 100, ()))).sequence == 100
    assert inbox.accept(c.encode(Message(9, 100, ()))) is None  # duplicate
    assert inbox.accept(c.encode(Message(9, 99, ()))) is None  # late
    assert inbox.accept(c.encode(Message(9, 101, ()))).sequence == 101
    assert inbox.accept(c.encode(Message(9, 7_000_000, ()))).sequence == 7_000_000  # a gap: lost messages
    assert inbox.accept(c.encode(Message(9, 100, ()))) is None  # far behind is still behind
    assert inbox.dropped == {"own": 1, "stale": 3}
    assert inbox.accepted == 3


def test_sequence_order_survives_the_wrap():
    c = codec()
    inbox = Inbox(c)
    assert inbox.accept(c.encode(Message(9, 0xFFFF_FFF0, ()))) is not None
    assert inbox.accept(c.encode(Message(9, 5, ()))).sequence == 5  # wrapped forward
    assert inbox.accept(c.encode(Message(9, 0xFFFF_FFFF, ()))) is None  # late, across the wrap
    assert inbox.dropped == {"stale": 1}


def test_a_captured_message_replayed_later_is_stale_whatever_the_gap():
    # Version 2 took a sequence far behind for a restarted sender, so a
    # message captured long enough ago passed: here only a new epoch does.
    c = codec()
    inbox = Inbox(c)
    captured = c.encode(Message(9, 1, (FlowReport((1, 2), 90_000_000, saturated=True),), epoch=77))
    assert inbox.accept(captured) is not None
    for sequence in range(2, 3000):
        assert inbox.accept(c.encode(Message(9, sequence, (), epoch=77))) is not None
    assert inbox.accept(captured) is None
    assert inbox.dropped == {"stale": 1}


def test_a_new_epoch_is_a_restart_and_the_old_epoch_is_never_heard_again():
    c = codec()
    inbox = Inbox(c)
    old = [c.encode(Message(9, s, (), epoch=1)) for s in (1, 2, 3)]
    assert inbox.accept(old[0]) is not None and inbox.accept(old[1]) is not None
    # The core restarted (or moved to another manager): a new epoch starts anywhere.
    assert inbox.accept(c.encode(Message(9, 1, (), epoch=2))).epoch == 2
    assert inbox.accept(old[2]) is None  # the old session's straggler or replay
    assert inbox.accept(old[0]) is None
    assert inbox.accept(c.encode(Message(9, 2, (), epoch=2))) is not None
    assert inbox.dropped == {"stale": 2}


def test_a_receiver_remembers_sixteen_ended_sessions_per_sender():
    c = codec()
    inbox = Inbox(c)
    firsts = [c.encode(Message(4, 1, (), epoch=epoch)) for epoch in range(100, 118)]
    for data in firsts:
        assert inbox.accept(data) is not None
    # 100..116 ended; the newest 16 of them (101..116) are refused, 100 was forgotten.
    assert all(inbox.accept(data) is None for data in firsts[1:17])
    assert inbox.accept(firsts[0]) is not None
    assert inbox.dropped == {"stale": 16}


# ---- fuzzing ---------------------------------------------------------------

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


# ---- send policy and expiry -------------------------------------------------


def test_send_on_change_plus_heartbeat():
    policy = SendPolicy(heartbeat_periods=4, change_ratio=0.05)
    steady = {(1, 2): 10_000_000}
    sent = [p for p in range(12) if policy.should_send(steady, p)]
    assert sent == [0, 4, 8]  # heartbeats only
    assert policy.should_send({(1, 2): 10_400_000}, 9) is False  # 4% move: no
    assert policy.should_send({(1, 2): 10_600_000}, 10) is True  # 6% move: send
    assert policy.should_send({(1, 2): 10_600_000, (3,): 1}, 11) is True  # new flow
    assert policy.should_send({(1, 2): 10_600_000}, 12) is True  # flow ended
    assert policy.should_send({(1, 2): 10_600_000}, 13) is False


def test_peer_flows_expire_after_silence():
    peers = PeerFlows(expiry_periods=12)
    peers.update(Message(4, 1, (FlowReport((1,), 1000),)), period=10)
    peers.update(Message(5, 1, ()), period=15)
    assert peers.expire(21) == []
    assert peers.expire(22) == [4]
    assert peers.flows() == {5: ()}


@pytest.mark.parametrize(
    "make,text",
    [
        (lambda: Codec(1 << 32, 10, instances=2, key=KEY), "experiment_tag must fit in 32 bits"),
        (lambda: Codec(1, 0, instances=2, key=KEY), "link_count must be 1..65535, got 0"),
        (lambda: Codec(1, 10, instances=0, key=KEY), "instances must be 1..65536, got 0"),
        (lambda: SendPolicy(heartbeat_periods=0), "heartbeat_periods must be at least 1"),
        (lambda: SendPolicy(change_ratio=1.0), r"change_ratio must lie in \[0, 1\)"),
        (lambda: PeerFlows(expiry_periods=0), "expiry_periods must be at least 1"),
    ],
)
def test_bad_settings(make, text):
    with pytest.raises(MetadataError, match=text):
        make()


def test_header_is_twenty_bytes_and_the_tag_sixteen():
    assert (HEADER.size, TAG_BYTES) == (20, 16)


if __name__ == "__main__":
    import atheris

    import collapsar.manager.sharing.metadata as metadata

    # Coverage guidance on the decoder only: instrumenting everything loaded is slow.
    metadata.Codec.decode = atheris.instrument_func(metadata.Codec.decode)
    atheris.Setup(sys.argv, lambda data: fuzz_one(bytes(data)))
    atheris.Fuzz()
