"""Container mode's reconciling, against a fake engine view and a fake TCAL:
what a scan does with containers that appear, restart, stop, move, or run
when the timeline says they are absent, and what join/leave/crash ask of
the engine."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
from fake_tc import FakeTree
from test_manager_fakes import FakeState, full_mesh, path, timeline_of

from collapsar.manager.container import hostsfile, nsbind
from collapsar.manager.container.engine import Seen, seen_from
from collapsar.manager.container.run import ContainerOptions, ContainerRun
from collapsar.model import Service
from collapsar.tcal.plan import Shaping

NAMES = ["a", "b", "c"]


class FakeView:
    def __init__(self):
        self.calls: list[tuple] = []
        self.owned: set[str] = set(NAMES)
        self.changed = __import__("threading").Event()

    def start(self, instance):
        self.calls.append(("start", instance))

    def stop(self, instance, grace_s):
        self.calls.append(("stop", instance, grace_s))

    def kill(self, instance):
        self.calls.append(("kill", instance))

    def owns(self, instance):
        return instance in self.owned

    def scale_up(self, service, replicas):
        self.calls.append(("scale_up", service, replicas))


@pytest.fixture
def bindings(monkeypatch):
    """nsbind without mounts: records which bindings exist."""
    live: set[str] = set()

    def bind(container_id, pid):
        name = nsbind.binding_name(container_id, pid)
        live.add(name)
        return name

    monkeypatch.setattr(nsbind, "bind", bind)
    monkeypatch.setattr(nsbind, "release", live.discard)
    monkeypatch.setattr(nsbind, "ifname_with", lambda name, ip: "eth0")
    # Fake pids are no containers: never touch /proc/PID/root of real processes.
    monkeypatch.setattr(hostsfile, "update", lambda pid, ip_of: True)
    monkeypatch.setattr(hostsfile, "mark_shaped", lambda pid: True)
    return live


def record_names(run) -> list[tuple[int, dict]]:
    written: list[tuple[int, dict]] = []
    run.names_writer = lambda pid, ip_of: written.append((pid, dict(ip_of)))
    run.marked = []
    run.shaped_marker = run.marked.append
    return written


def make_run(first_instances=("a", "b", "c"), experiment=None):
    FakeTree.made.clear()
    state = FakeState(list(first_instances), full_mesh(list(first_instances), rate_bps=10_000_000))
    later = FakeState(NAMES, full_mesh(NAMES, rate_bps=5_000_000))
    timeline = timeline_of([(0, (), state), (60_000_000, (), later)])
    services = {name: Service(name) for name in NAMES}
    experiment = experiment or SimpleNamespace(
        settings=SimpleNamespace(wire_overhead=True, period_us=50_000),
        source="t",
        services=tuple(services.values()),
        service=services.__getitem__,
    )
    tcal = SimpleNamespace(TcTree=FakeTree, Shaping=Shaping)
    return ContainerRun(experiment, timeline, ContainerOptions("e-1"), FakeView(), tcal)


def seen(name, pid=100, ip=None, running=True, code=0, cid=None):
    ips = {"a": "10.0.0.2", "b": "10.0.0.3", "c": "10.0.0.4"}
    return Seen(
        name, cid or f"{name}0000000000000", pid if running else 0, ip if ip is not None else ips[name], running, code
    )


def test_running_containers_get_a_core_with_the_paths_in_force(bindings):
    run = make_run()
    run._reconcile({n: seen(n) for n in NAMES})
    assert sorted(run.shaped) == NAMES
    tree_a = run.shaped["a"].core.tree
    assert tree_a.netns == "cxd-a00000000000-100" and tree_a.ifname == "eth0" and tree_a.netem is False
    assert {ip: s.rate_bps for ip, s in tree_a.shapings.items()} == {"10.0.0.3": 10_000_000, "10.0.0.4": 10_000_000}
    assert bindings == {"cxd-a00000000000-100", "cxd-b00000000000-100", "cxd-c00000000000-100"}


def test_a_destination_is_shaped_once_its_address_is_known(bindings):
    run = make_run()
    run._reconcile({"a": seen("a"), "b": seen("b")})
    assert set(run.shaped["a"].core.tree.shapings) == {"10.0.0.3"}
    run._reconcile({n: seen(n) for n in NAMES})
    assert run.shaped["a"].core.tree.calls[-1] == ("add", "10.0.0.4")
    assert set(run.shaped["c"].core.tree.shapings) == {"10.0.0.2", "10.0.0.3"}


def test_a_restarted_container_is_shaped_again_in_its_new_namespace(bindings):
    run = make_run()
    run._reconcile({n: seen(n) for n in NAMES})
    old_tree = run.shaped["b"].core.tree
    run._reconcile({**{n: seen(n) for n in NAMES}, "b": seen("b", pid=200)})
    assert run.shaped["b"].netns == "cxd-b00000000000-200"
    assert run.shaped["b"].core.tree is not old_tree
    assert ("teardown",) not in old_tree.calls  # its namespace went, and the tree with it
    assert "cxd-b00000000000-100" not in bindings and "cxd-b00000000000-200" in bindings


def test_a_stopped_container_loses_its_core_and_binding_and_reports_its_exit(bindings):
    run = make_run()
    run._reconcile({n: seen(n) for n in NAMES})
    run.t0_ns = 1  # the timeline runs
    run._reconcile({**{n: seen(n) for n in NAMES}, "c": seen("c", running=False, code=3)})
    assert sorted(run.shaped) == ["a", "b"]
    assert run.status["c"] == "exited(3)"
    assert not any(name.startswith("cxd-c") for name in bindings)


def test_a_container_the_oom_killer_ended_is_reported_so(bindings):
    run = make_run()
    run._reconcile({n: seen(n) for n in NAMES})
    run.t0_ns = 1
    killed = replace(seen("c", running=False, code=137), oom_killed=True)  # the engine's State.OOMKilled
    run._reconcile({**{n: seen(n) for n in NAMES}, "c": killed})
    assert run.status["c"] == "oom-killed"
    run._reconcile({n: seen(n, pid=300) for n in NAMES})  # started again by hand
    assert run.status["c"] == "up"


def test_an_instance_absent_at_t0_is_stopped_when_found_running(bindings):
    run = make_run(first_instances=("a", "b"))
    assert run.status == {"a": "up", "b": "up", "c": "absent"}
    run._reconcile({n: seen(n) for n in NAMES})
    assert run.view.calls == [("stop", "c", 0)]
    assert sorted(run.shaped) == ["a", "b"]
    # Its address is known, so the others hold a (cut) class for it already.
    assert "10.0.0.4" in run.shaped["a"].core.tree.cut_ips


def test_a_moved_address_rebuilds_every_tree(bindings):
    run = make_run()
    run._reconcile({n: seen(n) for n in NAMES})
    first = {n: run.shaped[n].core.tree for n in NAMES}
    run._reconcile({**{n: seen(n) for n in NAMES}, "b": seen("b", ip="10.0.0.9")})
    for name in NAMES:
        assert ("teardown",) in first[name].calls
        assert run.shaped[name].core.tree is not first[name]
    assert set(run.shaped["a"].core.tree.shapings) == {"10.0.0.9", "10.0.0.4"}


def test_timeline_actions_go_to_the_engine():
    run = make_run()
    run.options.grace_s = 2.5
    run.stop_instance("a")
    run.kill_instance("b")
    run.start_instance("c")
    run.view.owned.discard("c")
    run.start_instance("c")  # on another node: only the status changes here
    assert run.view.calls == [("stop", "a", 2.5), ("kill", "b"), ("start", "c")]
    assert run.status == {"a": "stopped", "b": "crashed", "c": "up"}


def test_set_paths_reaches_only_shaped_sources_and_known_destinations(bindings):
    run = make_run()
    run._reconcile({"a": seen("a"), "b": seen("b")})
    run.set_paths("a", {"b": path("a", "b", rate_bps=1_000_000), "c": path("a", "c")})
    run.set_paths("c", {"a": path("c", "a")})  # not here: nothing to do
    assert run.shaped["a"].core.tree.calls[-1] == ("change_many", {"10.0.0.3": {"rate_bps": 1_000_000}})


def test_seen_from_reads_the_inspect_document():
    attrs = {
        "Id": "f" * 64,
        "Config": {
            "Labels": {
                "org.collapsar.experiment": "e-1",
                "org.collapsar.role": "instance",
                "org.collapsar.service": "web",
                "com.docker.swarm.task.name": "s_web.2.x",
            }
        },
        "State": {"Running": True, "Pid": 4242, "ExitCode": 0},
        "NetworkSettings": {
            "Networks": {
                "docker_gwbridge": {"NetworkID": "gw", "IPAddress": "172.18.0.3"},
                "s_collapsar": {"NetworkID": "net1", "IPAddress": "10.201.0.7"},
            }
        },
    }
    assert seen_from(attrs, "e-1", {"net1"}) == Seen("web-2", "f" * 64, 4242, "10.201.0.7", True, 0)
    assert seen_from(attrs, "e-2", {"net1"}) is None
    stopped = {**attrs, "State": {"Running": False, "Pid": 0, "ExitCode": 137}}
    assert seen_from(stopped, "e-1", {"other"}) == Seen("web-2", "f" * 64, 0, None, False, 137)
    oom = {**attrs, "State": {"Running": False, "Pid": 0, "ExitCode": 137, "OOMKilled": True}}
    assert seen_from(oom, "e-1", {"other"}) == Seen("web-2", "f" * 64, 0, None, False, 137, oom_killed=True)


def test_a_join_on_swarm_scales_the_service_to_the_joined_index():
    from collapsar.parser import parse_text

    experiment = parse_text("experiment: {name: j}\nservices: {web: {command: [x], replicas: 2}}\n")
    run = make_run(experiment=experiment)
    run.options.bootstrapper = "b" * 64
    run.start_instance("web-3")  # no container of it anywhere yet
    run.start_instance("web")
    run.view.owned.add("web-4")
    run.start_instance("web-4")  # a container here already (Compose): started, not scaled
    assert run.view.calls == [("scale_up", "web", 3), ("scale_up", "web", 1), ("start", "web-4")]


def test_a_container_that_cannot_be_shaped_now_is_retried_not_fatal(bindings, monkeypatch):
    import io

    from collapsar.errors import CollapsarError

    run = make_run()
    run.out = io.StringIO()

    def gone(name, ip):
        raise CollapsarError(f"namespace {name}: no interface holds {ip}")

    monkeypatch.setattr(nsbind, "ifname_with", gone)
    run._reconcile({"a": seen("a")})
    assert run.shaped == {} and bindings == set()  # the binding made for it is released
    assert run.view.changed.is_set()
    assert (
        "warning: a: not shaped yet: namespace cxd-a00000000000-100: no interface holds 10.0.0.2" in run.out.getvalue()
    )


def test_instance_names_reach_every_shaped_container_and_follow_new_addresses(bindings):
    run = make_run()
    written = record_names(run)
    run.t0_ns = 1  # after t=0: a container is marked as soon as it is shaped and named
    run._reconcile({"a": seen("a", pid=11), "b": seen("b", pid=12)})
    assert sorted(pid for pid, _ in written) == [11, 12]
    assert written[-1][1] == {"a": "10.0.0.2", "b": "10.0.0.3"}
    assert sorted(run.marked) == [11, 12]  # shaped and named: their commands may start
    written.clear()
    run._reconcile({"a": seen("a", pid=11), "b": seen("b", pid=12)})
    assert written == []  # nothing new: nothing rewritten
    run._reconcile({n: seen(n, pid=p) for n, p in (("a", 11), ("b", 12), ("c", 13))})
    # c's address is new: every container learns it, c included
    assert sorted(pid for pid, _ in written) == [11, 12, 13]
    assert all(names == {"a": "10.0.0.2", "b": "10.0.0.3", "c": "10.0.0.4"} for _, names in written)
    assert sorted(run.marked) == [11, 12, 13]  # each marked once, when it was shaped


def test_before_t0_containers_are_named_but_marked_only_at_t0(bindings):
    run = make_run()
    written = record_names(run)
    run._reconcile({"a": seen("a", pid=11), "b": seen("b", pid=12)})
    assert sorted(pid for pid, _ in written) == [11, 12] and run.marked == []
    run._mark_shaped(list(run.shaped))  # what run() does at t=0
    assert sorted(run.marked) == [11, 12]
