"""Run a command inside a throwaway VM with a stock distro kernel.

Some kernels (minimal cloud kernels, and the one Collapsar is built on) lack
`sch_netem`; delay, jitter and loss then need another kernel.  This module
boots Debian's stock kernel under qemu through virtme-ng, runs one command in
it and returns that command's exit code.  `collapsar run --vm` and the
`tests/vm` tier both go through `run_in_vm`.

What the guest sees (virtme-ng 1.42, measured): the host's root filesystem
read-only over 9p, with copy-on-write overlays on /etc, /usr, /var, /home,
/opt, /srv and /tmp (writes there vanish with the VM); /run is a fresh tmpfs,
so /var/run/netns starts empty and `ip netns add` works; /root, /work and the
Python under /root/.pyenv are visible read-only.  Only directories passed as
`rwdirs` are shared back to the host.  The guest does not inherit the
caller's environment nor PATH, so the command is wrapped in a small shell
script that sets both, and it records the exit code in a file under the first
rwdir as well, since a guest that dies mid-run returns qemu's code instead.

This module does not own: what runs inside the VM, or interpreting its output.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pathlib
import platform
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from collapsar.errors import EnvironmentProblem, RunError

INSTALL_FIX = "apt-get install linux-image-amd64 qemu-system-x86 busybox-static && pip install virtme-ng==1.42"

# Debian's stock kernel images are named <upstream>-<abi>-<flavour>, e.g.
# vmlinuz-6.1.0-56-amd64; anything else in /boot is a custom build.
_DEBIAN_STOCK = re.compile(r"^vmlinuz-(\d+)\.(\d+)\.(\d+)-(\d+)-(amd64|cloud-amd64)$")

# The variables the runner always sets inside the guest, so code there can
# tell it runs in the VM (the kernel release alone could be a coincidence).
IN_VM_VAR = "COLLAPSAR_IN_VM"
HOST_RELEASE_VAR = "COLLAPSAR_VM_HOST_RELEASE"

# KVM hangs on the machines Collapsar is developed on, so software emulation
# is the default; COLLAPSAR_VM_KVM=1 says KVM is known to work here.
KVM_VAR = "COLLAPSAR_VM_KVM"

_RC_PREFIX = ".collapsar-vm-rc"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def find_kernel(
    boot: pathlib.Path = pathlib.Path("/boot"), modules: pathlib.Path = pathlib.Path("/lib/modules")
) -> pathlib.Path:
    """The newest Debian stock kernel image in `boot` that the host is not running.

    The guest loads modules (sch_netem is one) from the host's `modules`
    tree, so an image without its modules directory does not count.
    """
    running = platform.release()
    found = []
    for image in boot.glob("vmlinuz-*"):
        match = _DEBIAN_STOCK.match(image.name)
        release = image.name.removeprefix("vmlinuz-")
        if match and release != running and (modules / release).is_dir():
            found.append((tuple(int(g) for g in match.groups()[:4]), image))
    if not found:
        raise EnvironmentProblem(
            f"no Debian stock kernel image (vmlinuz-X.Y.Z-N-amd64 with /lib/modules/X.Y.Z-N-amd64) "
            f"in {boot} other than the running {running}",
            INSTALL_FIX,
        )
    return max(found)[1]


def tools_search_path(path: str | None = None) -> str:
    """`path` (default: this process's PATH) behind the directories of this
    interpreter's own scripts.  `.venv/bin/collapsar` runs without the venv
    activated, so without its bin on PATH, yet vng is installed there, and vng
    starts virtme-run by name from the same directory."""
    own = [str(pathlib.Path(sys.prefix) / "bin")]  # a venv's bin, whatever sys.executable links to
    if sys.executable:
        own.insert(0, str(pathlib.Path(sys.executable).parent))
    rest = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    return os.pathsep.join(dict.fromkeys(entry for entry in [*own, *rest] if entry))


def find_tools(path: str | None = None) -> dict[str, str]:
    """Absolute paths of vng, the virtme-run it starts, qemu and busybox, or
    an EnvironmentProblem naming the fix.  `path` as for tools_search_path."""
    search = tools_search_path(path)
    tools = {name: shutil.which(name, path=search) for name in ("vng", "virtme-run", "qemu-system-x86_64")}
    # virtme-ng builds its initramfs from a static busybox when the kernel
    # needs modules; without it vng stops before booting.
    tools["busybox"] = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
    missing = [name for name, found in tools.items() if found is None]
    if missing:
        raise EnvironmentProblem(f"cannot start a VM: {', '.join(missing)} not found (looked in {search})", INSTALL_FIX)
    return {name: found for name, found in tools.items() if found is not None}  # all of them, found


def kvm_wanted(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(KVM_VAR) == "1" and os.access("/dev/kvm", os.R_OK | os.W_OK)


def guest_script(argv: Sequence[str], cwd: str, env: Mapping[str, str], rc_file: str) -> str:
    """The shell script the guest runs: environment, cwd, the command, its exit code."""
    python_bin = str(pathlib.Path(sys.executable).parent)
    lines = [f"export PATH={shlex.quote(python_bin)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"VM environment: {name!r} is not a shell variable name")
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(f"cd {shlex.quote(cwd)} || exit 125")
    lines.append(shlex.join(argv))
    lines.append(f"rc=$?; echo $rc > {shlex.quote(rc_file)}; exit $rc")
    return "\n".join(lines)


def vng_command(
    argv: Sequence[str],
    rwdirs: Sequence[pathlib.Path | str],
    env: Mapping[str, str],
    kernel: pathlib.Path,
    vng: str = "vng",
    memory: str = "2G",
    cpus: int = 2,
    kvm: bool = False,
    cwd: str | None = None,
    rc_name: str = _RC_PREFIX,
) -> list[str]:
    """The vng command line that runs `argv` in a VM with `rwdirs` shared read-write.

    `env` is set inside the guest on top of the runner's own markers.
    """
    if not rwdirs:
        raise ValueError("run_in_vm needs at least one rwdir: the exit code comes back through it")
    shared = [pathlib.Path(d).resolve() for d in rwdirs]
    guest_env = {IN_VM_VAR: "1", HOST_RELEASE_VAR: platform.release(), **env}
    script = guest_script(argv, cwd or os.getcwd(), guest_env, str(shared[0] / rc_name))
    cmd = [vng, "--run", str(kernel), "--memory", memory, "--cpus", str(cpus)]
    if not kvm:
        cmd.append("--disable-kvm")
    for d in shared:
        cmd += ["--rwdir", str(d)]
    # One positional argument is taken by vng as a shell script verbatim.
    return cmd + ["--", script]


def run_in_vm(
    argv: Sequence[str],
    rwdirs: Sequence[pathlib.Path | str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    memory: str = "2G",
    cpus: int = 2,
    log: Callable[[str], None] | None = None,
    cwd: str | None = None,
) -> int:
    """Boot the stock kernel, run `argv` in it and return its exit code.

    Guest stdout and stderr are passed line by line to `log` (default: this
    process's stderr).  The rwdirs must exist; the first also receives the
    exit-code file.  Raises EnvironmentProblem if the VM cannot be started,
    RunError if it did not finish within `timeout_s` or died before the
    command finished.
    """
    kernel = find_kernel()
    tools = find_tools()
    for d in rwdirs:
        if not pathlib.Path(d).is_dir():
            raise EnvironmentProblem(f"VM rwdir {d} does not exist", f"mkdir -p {d}")
    # Named per run: two VMs may share an rwdir.
    rc_name = f"{_RC_PREFIX}.{os.getpid()}.{time.monotonic_ns()}"
    rc_path = pathlib.Path(rwdirs[0]).resolve() / rc_name
    cmd = vng_command(argv, rwdirs, env or {}, kernel, tools["vng"], memory, cpus, kvm_wanted(), cwd, rc_name)
    last_lines: collections.deque[str] = collections.deque(maxlen=8)
    sink = log or (lambda text: print(text, file=sys.stderr, flush=True))

    def emit(line: str) -> None:
        last_lines.append(line)
        sink(line)

    vng_rc = _run_streaming(
        cmd,
        timeout_s,
        emit,
        f"VM ({kernel.name}) command {shlex.join(argv)!r}",
        {**os.environ, "PATH": tools_search_path()},
    )
    if not rc_path.exists():
        said = "\n".join(last_lines)
        raise RunError(
            f"VM ({kernel.name}) exited with code {vng_rc} before the command "
            f"{shlex.join(argv)!r} finished (no exit code in {rc_path}); its last output:\n{said}"
        )
    text = rc_path.read_text().strip()
    rc_path.unlink()
    if not text.isdigit():
        raise RunError(f"VM ({kernel.name}): exit-code file {rc_path} holds {text!r}, expected a number")
    return int(text)


def _run_streaming(
    cmd: list[str], timeout_s: float, emit: Callable[[str], None], what: str, env: Mapping[str, str] | None = None
) -> int:
    # A pipe (not a file) for the guest's output: vng opens the host's fds 1
    # and 2 separately, and two opens of one regular file overwrite each other.
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    deadline = time.monotonic() + timeout_s
    pending = b""
    restore = _raise_on_sigterm()
    try:
        while True:
            chunk = _read_some(proc, deadline)
            if chunk is None:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                emit(line.decode(errors="replace").rstrip("\r"))
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        # Also when out of time: a line without its end (pytest -v names a
        # test before running it) says what the guest was doing.
        if pending:
            emit(pending.decode(errors="replace"))
        if proc.poll() is None:
            # qemu runs in vng's session: end exactly that group, which we made.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:  # always: started with stdout=PIPE
            proc.stdout.close()
        restore()
    raise RunError(f"{what} did not finish within {timeout_s:.0f} s")


def _raise_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM unwind through `finally` (which ends the VM) instead of
    killing this process and leaving qemu running in its own session.
    Returns what puts the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers

    def stop(signum, frame):
        raise RunError("VM run stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    return restore


def _read_some(proc: subprocess.Popen, deadline: float) -> bytes | None:
    """Bytes from the guest, None at end of output; TimeoutExpired past the deadline."""
    assert proc.stdout is not None  # started with stdout=PIPE
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, 0)
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
        if ready:
            return os.read(proc.stdout.fileno(), 65536) or None
