"""When a core sends its metadata and how long a peer's flows are kept: the
send policy (on a change of the flows or of a rate beyond the ratio, else a
heartbeat), the expiry of a silent peer's flows, and the settings the codec,
the policy and the expiry refuse."""

import pytest
from metadata_support import KEY

from collapsar.manager.sharing.metadata import Codec, FlowReport, Message, MetadataError, PeerFlows, SendPolicy


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
