"""What cleanup believes of a journal's `cgroup` records, in a fake cgroup
tree (tests/unit/cgroup_support.py): the run's own groups go last,
instances' before the run's, at paths cleanup derives itself; a record
naming any other group (another run's, a system group, a path out of the
hierarchy, an instance the run never had, a controller that is not one)
refuses the whole journal, and the real cleanup code then removes nothing.
The same as root on real groups: tests/kernel/test_cleanup_attacks_cgroups.py."""

from __future__ import annotations

import pytest
from cgroup_support import v1_tree, v2_tree
from manager_rundir_support import JOURNAL, records

from collapsar.errors import CollapsarError
from collapsar.manager.local import teardown
from collapsar.manager.local.cleanup import Step, plan_cleanup


def own_records(layout) -> list[dict]:
    """What a run of instances a and b (JOURNAL) with cpu and memory limits journals."""
    made = [("cpu", None), ("memory", None), ("cpu", "a"), ("memory", "a"), ("memory", "b")]
    return [
        {"kind": "cgroup", "controller": c, "instance": i, "path": str(layout.group(c, "a1b2c3", i))} for c, i in made
    ]


def make_groups(layout) -> list:
    paths = [layout.group(r["controller"], "a1b2c3", r["instance"]) for r in own_records(layout)]
    for path in paths:
        path.mkdir()
    return paths


@pytest.mark.parametrize("tree", [v1_tree, v2_tree])
def test_the_runs_groups_go_last_instances_first_at_derived_paths(tmp_path, tree):
    _, layout = tree(tmp_path)
    steps = plan_cleanup(JOURNAL + own_records(layout), layout=layout)
    group = lambda c, i=None: Step("rm_cgroup", {"path": str(layout.group(c, "a1b2c3", i))})  # noqa: E731
    if tree is v1_tree:
        want = [group("memory", "b"), group("memory", "a"), group("cpu", "a"), group("memory"), group("cpu")]
    else:  # one hierarchy: a group per instance and one for the run, once each
        want = [group("memory", "b"), group("memory", "a"), group("memory")]
    assert steps[-len(want) :] == want
    assert steps[-len(want) - 1] == Step("rm_hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"})  # after everything else


def forged(layout, tmp_path) -> list[tuple[dict, str]]:
    run = layout.group("memory", "a1b2c3", None)
    return [
        (
            {"kind": "cgroup", "controller": "memory", "instance": None, "path": str(tmp_path / "memory" / "system")},
            f"cgroup record '{tmp_path}/memory/system': not a control group of run a1b2c3; expected {run}",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": "a", "path": f"{run}/a/../../system"},
            f"cgroup record '{run}/a/../../system': not a control group of run a1b2c3; expected {run}/a",
        ),
        (
            {
                "kind": "cgroup",
                "controller": "memory",
                "instance": None,
                "path": str(layout.group("memory", "0000ff", None)),
            },
            "not a control group of run a1b2c3",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": "../../system", "path": f"{run}/../../system"},
            "(instance ../../system): the journal records no namespace for that instance",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": "zz", "path": f"{run}/zz"},
            f"cgroup record '{run}/zz' (instance zz): the journal records no namespace for that instance",
        ),
        (
            {"kind": "cgroup", "controller": "pids", "instance": None, "path": str(tmp_path / "pids")},
            "controller 'pids'; expected one of cpu, cpuset, memory",
        ),
    ]


def test_a_forged_cgroup_record_refuses_the_journal_and_cleanup_removes_nothing(tmp_path):
    _, layout = v1_tree(tmp_path)
    mine = make_groups(layout)
    victims = [tmp_path / "memory" / "system", layout.group("memory", "0000ff", None)]
    for victim in victims:
        victim.mkdir()
    for record, why in forged(layout, tmp_path):
        journal = JOURNAL + own_records(layout) + [record]
        with pytest.raises(CollapsarError) as refused:
            teardown.execute(plan_cleanup(journal, layout=layout))
        assert str(refused.value).startswith(f"journal:{len(journal)}: ") and why in str(refused.value)
        assert all(path.is_dir() for path in mine + victims)
    # The control: the run's own records alone remove its groups, and nothing else
    # (its other steps would act on the host's namespaces and links: not here).
    steps = plan_cleanup(JOURNAL + own_records(layout), layout=layout)
    teardown.execute([step for step in steps if step.action == "rm_cgroup"])
    assert not any(path.exists() for path in mine) and all(path.is_dir() for path in victims)


def test_a_record_of_a_controller_this_host_does_not_mount_is_not_acted_on(tmp_path):
    _, layout = v2_tree(tmp_path)
    layout.hierarchies.pop("cpuset")
    record = {"kind": "cgroup", "controller": "cpuset", "instance": "a", "path": "/anything"}
    steps = plan_cleanup(JOURNAL + [record], layout=layout)
    assert not [s for s in steps if s.action == "rm_cgroup"]


def test_a_journal_without_groups_needs_no_cgroup_layout():
    assert "rm_cgroup" not in {s.action for s in plan_cleanup(JOURNAL)}
    assert plan_cleanup(records(("run", {"run_id": "a1b2c3", "pid": 1}))) == []


def test_a_group_that_cannot_go_is_an_error_naming_it_and_left_for_a_retry(tmp_path):
    _, layout = v2_tree(tmp_path)
    run = layout.group("memory", "a1b2c3", None)
    (run / "stranger").mkdir(parents=True)  # the kernel refuses a group with a child group in it
    steps = [Step("rm_cgroup", {"path": str(run)})]
    with pytest.raises(CollapsarError, match=rf"^cannot remove the control group {run}: Directory not empty$"):
        teardown.execute(steps)
    assert (run / "stranger").is_dir()
    (run / "stranger").rmdir()
    assert teardown.execute(steps) == [f"removed control group {run}"]
    assert teardown.execute(steps) == []  # gone: a second cleanup has nothing to do
