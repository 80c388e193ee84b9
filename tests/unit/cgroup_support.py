"""Fake cgroup trees under a temporary directory for the limits tests
(test_manager_cgroups.py, test_manager_cgroup_cleanup.py): `v1_tree` lays
out separate cpu, cpuset and memory hierarchies beside a cgroup2 mount with
no controllers (the machines this project is built on), `v2_tree` one
cgroup2 mount that offers them all (current distributions); each returns
the mountinfo text that names them and the Layout detected from it.  Plain
directories and files: a test sees what would be written, never a kernel."""

from __future__ import annotations

from pathlib import Path

from collapsar.manager.local.cgroups import Layout, detect


def mount_line(number: int, mount: Path, fstype: str, options: str) -> str:
    return f"{number} 23 0:{number} / {mount} rw,relatime shared:{number} - {fstype} {fstype} rw,{options}"


def v1_tree(root: Path, cpus: str = "0-3", mems: str = "0") -> tuple[str, Layout]:
    lines = ["22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw"]
    for number, name in enumerate(("cpu,cpuacct", "cpuset", "memory", "pids"), start=30):
        mount = root / name
        mount.mkdir(parents=True)
        lines.append(mount_line(number, mount, "cgroup", name))
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpuset" / "cpuset.cpus").write_text(cpus + "\n")
    (root / "cpuset" / "cpuset.mems").write_text(mems + "\n")
    unified = root / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")
    lines.append(mount_line(40, unified, "cgroup2", "nsdelegate"))
    text = "\n".join(lines) + "\n"
    return text, detect(text)


def v2_tree(root: Path, cpus: str = "0-3", subtree: str = "cpu memory pids") -> tuple[str, Layout]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    (root / "cpuset.cpus.effective").write_text(cpus + "\n")
    text = mount_line(30, root, "cgroup2", "nsdelegate,memory_recursiveprot") + "\n"
    return text, detect(text)
