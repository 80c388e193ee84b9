"""The overlay-DNS address source: the wire format of its queries and
replies (A, PTR, name compression) and how task names become instances."""

import struct

import pytest

from collapsar.manager.container.dnsaddr import (TYPE_A, TYPE_PTR, decode_answers, encode_query, reverse_name,
                                                  slot_of)

from test_container_run import bindings  # noqa: F401 (a fixture, used by name)
from test_container_run import make_run, seen


def test_query_is_one_question_with_recursion_desired():
    assert encode_query("tasks.st_web", TYPE_A, 0x1234) == (
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        b"\x05tasks\x06st_web\x00\x00\x01\x00\x01")


def reply(query_id: int, question: bytes, answers: list[bytes], flags: int = 0x8180) -> bytes:
    return struct.pack("!HHHHHH", query_id, flags, 1, len(answers), 0, 0) + question + b"".join(answers)


def test_a_answers_with_a_compressed_owner_name():
    question = encode_query("tasks.st_web", TYPE_A, 7)[12:]
    answer = lambda ip: b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, 600, 4) + bytes(ip)  # noqa: E731
    data = reply(7, question, [answer([10, 201, 0, 5]), answer([10, 201, 0, 9])])
    assert decode_answers(data, 7) == [(TYPE_A, "10.201.0.5"), (TYPE_A, "10.201.0.9")]


def test_ptr_answer_names_the_task():
    question = encode_query(reverse_name("10.201.0.5"), TYPE_PTR, 9)[12:]
    target = b"\x0bst_web.2.ab\x0ast_network\x00"  # labels as the server writes them
    data = reply(9, question, [b"\xc0\x0c" + struct.pack("!HHIH", TYPE_PTR, 1, 600, len(target)) + target])
    assert decode_answers(data, 9) == [(TYPE_PTR, "st_web.2.ab.st_network")]


def test_wrong_id_or_server_failure_is_refused():
    question = encode_query("x", TYPE_A, 1)[12:]
    with pytest.raises(ValueError, match="DNS reply id 2"):
        decode_answers(reply(2, question, []), 1)
    with pytest.raises(ValueError, match="flags 0x8182"):
        decode_answers(reply(1, question, [], flags=0x8182), 1)
    assert decode_answers(reply(1, question, [], flags=0x8183), 1) == []  # NXDOMAIN: no tasks yet


def test_reverse_name_and_slot():
    assert reverse_name("10.201.0.5") == "5.0.201.10.in-addr.arpa"
    assert slot_of("st_web.3.k2j3.st_collapsar", "st_web") == 3
    assert slot_of("st_web2.3.k2j3", "st_web") is None
    assert slot_of("st_web.x.k2j3", "st_web") is None


def test_instances_on_other_nodes_are_destinations_not_cores(bindings):  # noqa: F811
    run = make_run()
    run._reconcile({"a": seen("a")}, remote={"b": "10.0.0.3", "c": "10.0.0.4", "zz": "10.0.0.99"})
    assert sorted(run.shaped) == ["a"]
    assert run.remote == {"b": "10.0.0.3", "c": "10.0.0.4"}  # not an instance of this experiment: ignored
    assert set(run.shaped["a"].core.tree.shapings) == {"10.0.0.3", "10.0.0.4"}
