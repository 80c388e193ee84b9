"""What local mode takes from an experiment: instances over the whole run,
commands with their environment, and whether netem is needed."""

import os

import pytest
from test_manager_fakes import FakeState, full_mesh, path, timeline_of

from collapsar.errors import CollapsarError, Where
from collapsar.manager.addressing import plan_network
from collapsar.manager.core import needs_netem
from collapsar.manager.dryrun import describe_run
from collapsar.manager.experiment import all_instances, launches, paths_from, service_of, timeline_paths
from collapsar.manager.programs import workload_build_dir
from collapsar.model import Experiment, Service, Settings


def experiment(*services: Service) -> Experiment:
    return Experiment(Settings("x"), services, (), (), source="x.yaml")


def test_service_of_prefers_the_longest_matching_service():
    exp = experiment(Service("web", ("a",)), Service("web-api", ("b",)))
    assert service_of(exp, "web") == "web"
    assert service_of(exp, "web-3") == "web"
    assert service_of(exp, "web-api-2") == "web-api"
    with pytest.raises(CollapsarError, match="instance db: belongs to no service of x.yaml"):
        service_of(exp, "db")


def test_instances_of_the_whole_run_in_order_of_appearance():
    timeline = timeline_of([(0, (), FakeState(["b", "a"])), (5, (), FakeState(["a"])), (9, (), FakeState(["a", "c"]))])
    assert all_instances(timeline) == ["b", "a", "c"]


def test_launch_carries_argv_env_workdir_and_identity():
    exp = experiment(Service("web", ("srv", "--port", "80"), env={"MODE": "fast"}, workdir="/srv"), Service("quiet"))
    plan = plan_network("a1b2c3", ["web", "web-2", "quiet"])
    result = launches(exp, ["web", "web-2", "quiet"], plan)
    assert set(result) == {"web", "web-2"}  # no command: on the network only
    web2 = result["web-2"]
    assert web2.argv == ("srv", "--port", "80") and web2.cwd == "/srv"
    assert web2.env == {
        "MODE": "fast",
        "COLLAPSAR_INSTANCE": "web-2",
        "COLLAPSAR_SERVICE": "web",
        "COLLAPSAR_IP": "10.77.0.3",
        "COLLAPSAR_RUN_ID": "a1b2c3",
        # this host's PATH, then the built workload tools (programs.py)
        "PATH": f"{os.environ['PATH']}:{workload_build_dir()}",
    }


def test_a_services_own_path_comes_first_and_the_tools_after_it():
    exp = experiment(Service("web", ("srv",), env={"PATH": "/opt/mine/bin"}))
    launch = launches(exp, ["web"], plan_network("a1b2c3", ["web"]))["web"]
    assert launch.env["PATH"] == f"/opt/mine/bin:{workload_build_dir()}"


def test_image_only_service_is_rejected_with_its_place():
    exp = experiment(Service("db", image="postgres:16", where=Where("x.yaml", 7)))
    with pytest.raises(
        CollapsarError,
        match=r"x.yaml:7: service db: local mode runs commands, and this "
        r"service has only an image \(postgres:16\)",
    ):
        launches(exp, ["db"], plan_network("a1b2c3", ["db"]))


def test_netem_is_needed_if_any_step_brings_delay():
    s0 = FakeState(["a", "b"], full_mesh(["a", "b"]))
    s1 = FakeState(["a", "b"], {**full_mesh(["a", "b"]), ("a", "b"): path("a", "b", delay_us=10)})
    assert not needs_netem(timeline_paths(timeline_of([(0, (), s0)])))
    assert needs_netem(timeline_paths(timeline_of([(0, (), s0), (1, (), s1)])))


def test_paths_from_fills_unreachable_with_none():
    state = FakeState(["a", "b", "c"], {("a", "b"): path("a", "b")})
    assert paths_from(state, "a", ["a", "b", "c"]) == {"b": path("a", "b"), "c": None}
    assert paths_from(state, "z", ["a", "z"]) == {"a": None}  # not present yet


def test_dry_run_describes_each_instance_and_the_ones_guarded():
    exp = experiment(Service("a", ("true",)), Service("b", ("true",)), Service("c", ("true",)))
    timeline = timeline_of([(0, (), FakeState(["a", "b", "c"], {("a", "b"): path("a", "b")}))])
    lines = describe_run(exp, timeline, "10.9.0.0/24")
    assert lines[0] == (
        "dry run of x.yaml: 3 instances on bridge cx000000br, subnet 10.9.0.0/24, "
        "leaves: pfifo (no delay/jitter/loss), 0 timeline steps after t=0"
    )
    assert lines[1] == "instance a: 10.9.0.2/24 on cx-000000-a/eth0, starts at t=0: true"
    assert any(line.startswith("  class 1:10 -> 10.9.0.3: rate=ceil 10Mbps") for line in lines)
    # No one reaches c: its guard drops its packets, a's tree keeps its placeholder uncut.
    assert not [line for line in lines if line.startswith("  cut at t=0 (blackhole)")]
    assert lines[lines.index("instance c: 10.9.0.4/24 on cx-000000-c/eth0, starts at t=0: true") + 1].startswith(
        "  guarded at t=0: no one reaches it"
    )
