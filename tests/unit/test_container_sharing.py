"""Container mode's sharing set-up: where the bootstrapper is on the
overlay, which managers are its peers, and where the media driver runs."""

from types import SimpleNamespace

from collapsar.manager.container import sharing as container_sharing
from collapsar.manager.container.sharing import SwarmPeers, overlay_address
from collapsar.manager.sharing.key import write_key_file


def inspection(networks, pid=4242):
    return {"State": {"Pid": pid}, "NetworkSettings": {"Networks": networks}}


def test_the_bootstrapper_address_is_the_one_on_the_stacks_experiment_overlay():
    assert (
        overlay_address(inspection({"ingress": {"IPAddress": "10.0.0.5"}, "exp_collapsar": {"IPAddress": "10.77.0.9"}}))
        == "10.77.0.9"
    )
    assert overlay_address(inspection({"bridge": {"IPAddress": "172.17.0.2"}})) is None
    assert overlay_address({}) is None


class FakeDns:
    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def task_addresses(self, service):
        self.asked.append(service)
        return self.answers


def test_peers_are_the_other_bootstrapper_tasks_on_the_metadata_port():
    dns = FakeDns(["10.77.0.3", "10.77.0.9", "10.77.0.12"])
    assert SwarmPeers(dns, "10.77.0.9")() == ["10.77.0.3:40106", "10.77.0.12:40106"]
    assert dns.asked == ["collapsar-bootstrap"]


def test_on_swarm_the_driver_runs_in_the_bootstrappers_namespace_and_listens_on_its_address(monkeypatch, tmp_path):
    made = {}

    class Recorder:
        def __init__(self, **kwargs):
            made.update(kwargs)

    monkeypatch.setattr(container_sharing, "ManagerSharing", Recorder)
    # The bootstrapper's secret mount, as /proc/PID/root shows it.
    (tmp_path / "4242").mkdir()
    key = write_key_file(tmp_path / "4242" / "key")
    monkeypatch.setattr(container_sharing, "SECRET_PATH", str(tmp_path / "{pid}" / "key"))
    run = SimpleNamespace(
        experiment=SimpleNamespace(source="x.yaml"),
        instances=["a", "b"],
        netem=False,
        timeline=SimpleNamespace(steps=[SimpleNamespace(state="s0")]),
        lock=None,
        options=SimpleNamespace(experiment_id="e1"),
    )
    _, peers = container_sharing.container_sharing(
        run, print, bootstrapper=inspection({"st_collapsar": {"IPAddress": "10.77.0.9"}}), dns=FakeDns([])
    )
    assert made["listen"] == "10.77.0.9:40106"
    assert made["driver_prefix"] == ("nsenter", "--net=/proc/4242/ns/net", "--")
    assert made["aeron_dir"] == "/dev/shm/collapsar-e1-aeron" and made["cores"] == {}
    assert isinstance(peers, SwarmPeers) and peers.own_ip == "10.77.0.9"
    assert made["key"] == key
    # Compose: no bootstrapper, no UDP, the driver where the manager is, a key of its own.
    made.clear()
    _, peers = container_sharing.container_sharing(run, print)
    assert (made["listen"], made["driver_prefix"], peers) == (None, (), None)
    assert len(made["key"]) == 32 and made["key"] != key
    # A bootstrapper without the secret (a stack of an older generator): this node alone, said once.
    said = []
    made.clear()
    _, peers = container_sharing.container_sharing(
        run,
        said.append,
        bootstrapper=inspection({"st_collapsar": {"IPAddress": "10.77.0.9"}}, pid=4343),
        dns=FakeDns([]),
    )
    assert (made["listen"], made["driver_prefix"], peers) == (None, (), None)
    assert len(said) == 1 and said[0].startswith(
        f"warning: sharing: {tmp_path}/4343/key: cannot open the metadata "
        f"key (No such file or directory); the stack grants no key"
    )
