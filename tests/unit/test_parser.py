"""The parser on valid input: defaults, every key, sugar-free structure."""

import textwrap

import pytest

from collapsar.errors import TopologyError, Where
from collapsar.model import Bridge, LinkProps, LinkSpec, Service, Settings
from collapsar.parser import parse_file, parse_text

MINIMAL = """\
services:
  web: {command: [x]}
"""


def parse(text: str, source: str = "t.yaml"):
    return parse_text(textwrap.dedent(text), source)


def test_defaults():
    experiment = parse(MINIMAL, "topologies/my_test.yaml")
    assert experiment.settings == Settings(name="my-test")
    assert experiment.services == (Service("web", ("x",), where=Where("topologies/my_test.yaml", 2)),)
    assert experiment.bridges == () and experiment.links == () and experiment.events == ()
    assert experiment.source == "topologies/my_test.yaml"


def test_default_name_without_a_usable_file_name():
    assert parse(MINIMAL, "<memory>").settings.name == "experiment"
    assert parse_text(MINIMAL).source == "<memory>"


def test_settings():
    experiment = parse(
        textwrap.dedent("""\
        experiment:
          name: geo-1
          period: 20ms
          paths: hops
          seed: 7
          wire-overhead: false
          congestion-control: reno
        """)
        + MINIMAL
    )
    assert experiment.settings == Settings(
        "geo-1", 20_000, "hops", 7, False, congestion_control="reno", where=Where("t.yaml", 2)
    )
    assert parse(MINIMAL).settings.congestion_control is None  # the host's default


def test_service_keys():
    experiment = parse("""\
        services:
          web:
            command: [nginx, -g, daemon off;, 10, yes, 1.50]
            image: nginx:1.25
            replicas: 0
            env: {MODE: fast, PORT: 8080, DEBUG: true, EMPTY: }
            workdir: /srv
            cpus: 0.5
            memory: 512m
        """)
    assert experiment.services[0] == Service(
        name="web",
        command=("nginx", "-g", "daemon off;", "10", "yes", "1.50"),
        image="nginx:1.25",
        replicas=0,
        env={"MODE": "fast", "PORT": "8080", "DEBUG": "true", "EMPTY": ""},
        workdir="/srv",
        cpus=0.5,
        memory_bytes=512 * 2**20,
        where=Where("t.yaml", 2),
    )


def test_command_string_is_split_like_a_shell_without_expansion():
    experiment = parse("""\
        services:
          web: {command: "sh -c 'echo $HOME > out' # no comment"}
        """)
    assert experiment.services[0].command == ("sh", "-c", "echo $HOME > out", "#", "no", "comment")


def test_image_alone_is_enough():
    assert parse("services:\n  web: {image: nginx}\n").services[0].command == ()


def test_links_bidirectional_and_one_way():
    experiment = parse("""\
        services:
          a: {command: [x]}
          b: {command: [x]}
        bridges: [s1]
        links:
          - {from: a, to: s1, latency: 5ms, jitter: 1ms, distribution: pareto, loss: 0.1%,
             bandwidth: 100Mbps}
          - {from: s1, to: b, latency: 20ms, up: 50Mbps, down: 10Mbps}
          - {from: a, to: b, direction: one-way, bandwidth: 1Gbps}
        """)
    a_s1, s1_b, a_b = experiment.links
    both = LinkProps(5000, 1000, "pareto", 0.001, 100_000_000)
    assert a_s1 == LinkSpec("a", "s1", both, both, Where("t.yaml", 6))
    assert s1_b.up == LinkProps(20_000, rate_bps=50_000_000)
    assert s1_b.down == LinkProps(20_000, rate_bps=10_000_000)
    assert a_b.up == LinkProps(rate_bps=10**9) and a_b.down is None
    assert a_b.key == frozenset({"a", "b"})


def test_up_only_leaves_down_unlimited():
    experiment = parse(MINIMAL + "bridges: [s1]\nlinks:\n  - {from: web, to: s1, up: 1Mbps}\n")
    assert experiment.links[0].up.rate_bps == 10**6
    assert experiment.links[0].down.rate_bps is None


def test_jitter_equal_to_latency_is_allowed():
    experiment = parse(MINIMAL + "bridges: [s1]\nlinks:\n  - {from: web, to: s1, latency: 2ms, jitter: 2ms}\n")
    assert experiment.links[0].up.jitter_us == 2000


def test_bridges_and_a_service_to_service_link():
    experiment = parse(
        MINIMAL + "  db: {command: [y]}\nbridges: [s1, core-2]\nlinks:\n  - {from: web, to: db, latency: 1ms}\n"
    )
    assert experiment.bridges == (Bridge("s1", Where("t.yaml", 4)), Bridge("core-2", Where("t.yaml", 4)))
    assert experiment.links[0].a == "web" and experiment.links[0].b == "db"


def test_merge_keys_make_link_templates():
    experiment = parse("""\
        x-wan: &wan {latency: 30ms, bandwidth: 10Mbps}
        services:
          web: {command: [x]}
          db: {command: [x]}
        bridges: [s1]
        links:
          - {<<: *wan, from: web, to: s1}
          - {<<: *wan, from: db, to: s1, latency: 5ms}
        """)
    web, db = experiment.links
    assert (web.up.delay_us, web.up.rate_bps) == (30_000, 10_000_000)
    assert (db.up.delay_us, db.up.rate_bps) == (5_000, 10_000_000)


def test_anchors_and_aliases_across_services():
    experiment = parse("""\
        services:
          web: &svc {command: [x], replicas: 2}
          db: *svc
        """)
    assert [s.replicas for s in experiment.services] == [2, 2]


def test_yaml_booleans_as_names_stay_names():
    experiment = parse("services:\n  on: {command: [x]}\nbridges: [yes, no]\n")
    assert experiment.services[0].name == "on"
    assert [b.name for b in experiment.bridges] == ["yes", "no"]


def test_empty_sections_are_fine():
    experiment = parse(MINIMAL + "bridges:\nlinks: []\nevents:\n")
    assert experiment.bridges == () and experiment.links == () and experiment.events == ()


def test_parse_file_keeps_the_name_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo.yaml").write_text(MINIMAL)
    experiment = parse_file("demo.yaml")
    assert experiment.source == "demo.yaml"
    assert experiment.services[0].where == Where("demo.yaml", 2)


def test_parse_file_reads_a_utf8_bom(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert parse_file(path).services[0].name == "web"


def test_parse_file_rejects_non_utf8_with_its_line(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"services:\n  web: {command: [caf\xe9]}\n")
    with pytest.raises(TopologyError) as error:
        parse_file(path)
    assert error.value.lines() == [f"{path}:2: not UTF-8 text (byte 0xe9); save the file as UTF-8"]


def test_parse_file_missing(tmp_path):
    with pytest.raises(TopologyError) as error:
        parse_file(tmp_path / "nope.yaml")
    assert error.value.lines() == [f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory"]
    assert error.value.exit_code == 2


def test_a_billion_laughs_stays_small():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    with pytest.raises(TopologyError) as error:
        parse("\n".join(lines) + "\n" + MINIMAL)
    assert len(error.value.problems) == 12  # one unknown top-level key each, nothing expanded


def test_deep_nesting_is_a_topology_error():
    text = "services:\n  web: {command: [x]}\nx-deep: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(TopologyError) as error:
        parse_text(text, "t.yaml")
    assert error.value.lines() == ["t.yaml:3: YAML nesting is too deep (more than 100 levels of [ and {)"]
    block = "".join("  " * i + "k:\n" for i in range(2000))
    with pytest.raises(TopologyError) as error:
        parse_text(block, "t.yaml")
    assert error.value.lines() == ["t.yaml:1: YAML nesting is too deep"]
