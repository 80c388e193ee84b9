"""The per-run key that authenticates flow metadata (see sharing/metadata.py and the
README's trust model).

Only the managers of a run hold it, never an instance:
- local mode and Compose have one manager, which makes a key in memory;
- Swarm: `collapsar generate --swarm` writes a fresh key file beside the
  stack, the stack declares it as a Swarm secret granted to the
  bootstrapper service alone (Swarm keeps it encrypted in its raft log and
  hands it only to nodes that run a bootstrapper task, on a tmpfs), and each
  node's manager reads it from its bootstrapper's secret mount through
  /proc/PID/root (container/sharing.py): in no environment, no image, no
  `docker inspect` output;
- the multi-manager harness (share_peer) reads a key file given to it.

A key file holds 64 hex digits (32 bytes; `openssl rand -hex 32` makes one)
and must be a regular file that only its owner, this user, can read.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from collapsar.errors import CollapsarError

KEY_BYTES = 32


class KeyFileError(CollapsarError):
    """A key file that is missing, unsafe or not a key."""


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def write_key_file(path: str | os.PathLike) -> bytes:
    """A fresh key, written to `path` (mode 0600) through a new file renamed
    into place: whatever was at `path`, a symlink included, is replaced,
    never written through."""
    path = Path(path)
    key = new_key()
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    created = False
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        created = True
        try:
            os.write(fd, key.hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError as error:
        if created:
            temp.unlink(missing_ok=True)
        raise KeyFileError(f"{path}: cannot write the metadata key ({error.strerror})") from None
    return key


def read_key_file(path: str | os.PathLike) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise KeyFileError(f"{path}: cannot open the metadata key ({error.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{path}: the metadata key must be a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise KeyFileError(
                f"{path}: the metadata key must be owned by uid {os.geteuid()} and readable "
                f"by its owner only (it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
            )
        text = os.read(fd, 4 * KEY_BYTES).strip()
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyFileError(f"{path}: expected {2 * KEY_BYTES} hex digits (a {KEY_BYTES}-byte key)")
    return key
