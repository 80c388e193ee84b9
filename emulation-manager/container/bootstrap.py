"""The Swarm bootstrapper: start the privileged manager on this node.

Swarm cannot run privileged services, so the stack runs this as a global
service (one task per node) with only the Docker socket; it starts the
manager container through the Docker API with the settings of
collapsar.deploy.manager_spec, forwards the manager's output to its own
(so `docker service logs` shows it), and removes the manager when it is
itself stopped (`docker stack rm`).  The manager also watches this
container and stops if it disappears without a word (a SIGKILL here).
"""

from __future__ import annotations

import signal
import socket
import threading

from collapsar.deploy.manager_spec import manager_environment, sdk_run_kwargs
from collapsar.deploy.naming import LABEL_EXPERIMENT, LABEL_ROLE
from collapsar.errors import CollapsarError

STOP_TIMEOUT_S = 20  # the manager's teardown: every tree and binding


def manager_name(experiment: str, node_id: str) -> str:
    return f"collapsar-manager-{experiment}-{node_id[:12]}"


def own_container(client):
    """This task's container: Swarm sets its hostname to the container id."""
    try:
        return client.containers.get(socket.gethostname())
    except Exception as error:
        raise CollapsarError(
            f"bootstrapper: cannot find its own container by hostname "
            f"{socket.gethostname()!r} ({error}); leave the service's hostname unset"
        ) from None


def bootstrap(client, experiment: str, topology_b64: str, image: str, say) -> int:
    me = own_container(client)
    node_id = client.info().get("Swarm", {}).get("NodeID") or "local"
    name = manager_name(experiment, node_id)
    for old in client.containers.list(all=True, filters={"name": name}):
        if old.labels.get(LABEL_EXPERIMENT) == experiment and old.name == name:
            say(f"removing {name} left by an earlier bootstrapper")
            old.remove(force=True)
    environment = {**manager_environment(experiment, topology_b64), "COLLAPSAR_BOOTSTRAPPER": me.id}
    labels = {LABEL_EXPERIMENT: experiment, LABEL_ROLE: "manager"}
    manager = client.containers.run(**sdk_run_kwargs(image, name, environment, labels))
    say(f"started {name} ({manager.id[:12]}) on node {node_id[:12]}")
    stopper = threading.Thread(target=_stop, args=(manager, say), daemon=True)

    def on_signal(signum, frame) -> None:
        if not stopper.is_alive() and stopper.ident is None:
            stopper.start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    for chunk in manager.logs(stream=True, follow=True):
        print(chunk.decode(errors="replace"), end="", flush=True)
    if stopper.ident is not None:  # we were told to stop: the stopper removes it
        stopper.join()
        return 0
    result = manager.wait()  # the manager ended on its own: report, clean, pass on its code
    say(f"{name} exited with {result.get('StatusCode')}")
    manager.remove(force=True)
    return int(result.get("StatusCode") or 1)


def _stop(manager, say) -> None:
    try:
        manager.stop(timeout=STOP_TIMEOUT_S)
        manager.remove(force=True)
        say(f"removed {manager.name}")
    except Exception as error:  # reported; the manager's own watch of us is the fallback
        say(f"warning: removing {manager.name}: {error}")
