"""What a receiver of metadata drops, and why: authentic but wrong messages
(a manager's bug) rejected strictly with a reason, its own messages back
over IPC, duplicates and late ones (across the sequence wrap), captured
messages replayed whatever the gap, and old sessions of a restarted sender
(epochs, sixteen remembered per sender)."""

import struct

import pytest
from metadata_support import INSTANCES, codec, expected_tag, sample

from collapsar.manager.sharing.metadata import TAG_BYTES, FlowReport, Inbox, MalformedMessage, Message


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
