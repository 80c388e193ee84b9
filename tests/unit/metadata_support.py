"""What the metadata codec tests share (test_metadata_*.py): a codec of one
experiment tag, key and instance count (`codec(...)`, other links, key or
instances on request), the tag computed on its own from the README's trust
model (`expected_tag`), and a sample message of two flows."""

import hashlib
import hmac

from collapsar.manager.sharing.metadata import Codec, FlowReport, Message

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
