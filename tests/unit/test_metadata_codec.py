"""The metadata codec's messages: their exact bytes (narrow and wide link
ids), round trips and sizes, the saturated flag, rates in whole kbit/s, the
sequence wrapping at 32 bits, what the encoder refuses, and authentication
(a message under another key is forged, every bit of body and tag is
covered, short keys are refused).  What a receiver drops:
test_metadata_inbox.py; which flows a sender may report, and the bus's caps:
test_metadata_routes.py."""

import pytest
from metadata_support import codec, expected_tag, sample

from collapsar.manager.sharing.metadata import (
    HEADER,
    TAG_BYTES,
    FlowReport,
    Inbox,
    MalformedMessage,
    Message,
    MetadataError,
)


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


def test_header_is_twenty_bytes_and_the_tag_sixteen():
    assert (HEADER.size, TAG_BYTES) == (20, 16)
