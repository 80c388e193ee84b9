"""Aeron transport for flow metadata: a cffi binding of the C client, the media
`Transport` that notices a dead media driver (`aeron_driver`) and restarts it.

Built by scripts/build-aeron.sh into third_party/aeron/install (or wherever
COLLAPSAR_AERON_HOME points).  Choices, and why:
- cffi ABI mode (dlopen + a cdef of the few functions we call): no compiler at
  run time and no build step in the Python package; our traffic is a handful of
  messages per 50 ms period, far below what the libffi call overhead limits.
- The client runs with the conductor *agent invoker*: no client thread, so no
  C thread ever calls into Python, callbacks happen inside `do_work()`/`poll()`
  on the caller's thread, and closing before the interpreter exits is simple
  (an atexit hook closes whatever is still open).
- The driver runs `threading.mode=SHARED` (one thread: this machine has 2
  cores) with 64 KiB terms (the minimum) so a publication costs ~200 KiB of
  /dev/shm instead of tens of MiB; a message may then be up to 8 KiB.
- Fragment buffers belong to the driver's log: they are copied inside the
  callback, through Aeron's fragment assembler so a message larger than the
  UDP MTU arrives whole.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import time
import weakref
from pathlib import Path
from typing import Protocol

from cffi import FFI

from collapsar.errors import EnvironmentProblem, RunError

log = logging.getLogger(__name__)


class Driver(Protocol):
    """What a client's transport needs of its media driver (driver.MediaDriver)."""

    aeron_dir: Path
    process: subprocess.Popen | None

    @property
    def pid(self) -> int | None: ...
    def alive(self) -> bool: ...
    def start(self) -> None: ...
    def stop(self, timeout_s: float = ...) -> int | None: ...


TERM_LENGTH_BYTES = 64 * 1024
DRIVER_TIMEOUT_MS = 2000
_ERROR_DRIVER_TIMEOUT = 1000  # AERON_CLIENT_ERROR_DRIVER_TIMEOUT
_OFFER_RETRY = {-1: "not connected", -2: "back pressured", -3: "admin action"}
_OFFER_FATAL = {-4: "publication closed", -5: "max position exceeded", -6: "publication error"}

# What we call, by name; the declarations are read from the installed aeronc.h,
# so the ABI-mode binding cannot drift from the library it loads.
_TYPES = (
    "aeron_context_t aeron_t aeron_publication_t aeron_subscription_t aeron_image_t aeron_header_t "
    "aeron_async_add_publication_t aeron_async_add_subscription_t aeron_fragment_assembler_t"
).split()
_CALLBACK_TYPES = (
    "aeron_error_handler_t aeron_notification_t aeron_fragment_handler_t aeron_on_available_image_t "
    "aeron_on_unavailable_image_t aeron_reserved_value_supplier_t"
).split()
_FUNCTIONS = """
    aeron_context_init aeron_context_close aeron_context_set_dir aeron_context_set_driver_timeout_ms
    aeron_context_set_client_name aeron_context_set_error_handler aeron_context_set_use_conductor_agent_invoker
    aeron_init aeron_start aeron_main_do_work aeron_close aeron_is_closed
    aeron_async_add_publication aeron_async_add_publication_poll
    aeron_async_add_subscription aeron_async_add_subscription_poll
    aeron_publication_offer aeron_publication_is_connected aeron_publication_close
    aeron_subscription_poll aeron_subscription_image_count aeron_subscription_close
    aeron_fragment_assembler_create aeron_fragment_assembler_delete aeron_fragment_assembler_handler
    aeron_errcode aeron_errmsg""".split()


def _declarations(header: str) -> str:
    """The cdef for the names above, cut out of aeronc.h (one declaration each)."""
    patterns = (
        [rf"^typedef struct \w+ {name};" for name in _TYPES]
        + [rf"^typedef [\w ]+\(\*{name}\)\([^;]*\);" for name in _CALLBACK_TYPES]
        + [rf"^(?:const )?\w+ \*?{name}\([^;]*\);" for name in _FUNCTIONS]
    )
    found = []
    for pattern in patterns:
        match = re.search(pattern, header, re.MULTILINE)
        if match is None:
            raise EnvironmentProblem(
                f"aeronc.h lacks a declaration matching {pattern!r}",
                "rebuild with scripts/build-aeron.sh --force (Aeron 1.52.2)",
            )
        found.append(match.group(0))
    return "\n".join(found)


class AeronError(RunError):
    """The Aeron client or media driver failed; the message carries Aeron's own."""


def aeron_home() -> Path:
    """Where build-aeron.sh installed libaeron.so, aeronc.h and aeronmd."""
    default = Path(__file__).resolve().parents[2] / "third_party" / "aeron" / "install"  # the checkout
    home = Path(os.environ.get("COLLAPSAR_AERON_HOME", default))
    if not (home / "lib" / "libaeron.so").is_file() or not (home / "bin" / "aeronmd").is_file():
        raise EnvironmentProblem(
            f"Aeron is not built ({home} lacks lib/libaeron.so or bin/aeronmd)",
            "run scripts/build-aeron.sh (or point COLLAPSAR_AERON_HOME at an install)",
        )
    return home


_ffi = FFI()
_lib = None


def _library():
    global _lib
    if _lib is None:
        home = aeron_home()
        _ffi.cdef(_declarations((home / "include" / "aeronc.h").read_text()))
        _lib = _ffi.dlopen(str(home / "lib" / "libaeron.so"))
    return _lib


def _failure(what: str) -> AeronError:
    lib = _library()
    message = _ffi.string(lib.aeron_errmsg()).decode(errors="replace")
    return AeronError(f"{what}: aeron error {lib.aeron_errcode()}: {message}")


def ipc_channel(term_length_bytes: int = TERM_LENGTH_BYTES) -> str:
    return f"aeron:ipc?term-length={term_length_bytes}"


def udp_channel(endpoint: str, term_length_bytes: int = TERM_LENGTH_BYTES) -> str:
    """A unicast channel: the subscriber binds `endpoint` (ip:port), publishers send to it."""
    return f"aeron:udp?endpoint={endpoint}|term-length={term_length_bytes}"


# ---- client ------------------------------------------------------------------

_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()
_started_drivers: set[Driver] = set()  # strong: a forgotten driver still gets stopped


def stop_at_exit(driver: Driver) -> None:
    """Stop `driver` when this process exits, after the clients closed."""
    _started_drivers.add(driver)


def forget_at_exit(driver: Driver) -> None:
    _started_drivers.discard(driver)


@atexit.register
def _close_at_exit() -> None:
    """Clients first (a client outliving its driver logs timeouts), then the
    drivers this process started, by PID, so none is orphaned."""
    for client in list(_open_clients):
        client.close()
    for driver in list(_started_drivers):
        driver.stop()


class Client:
    """An Aeron client bound to one driver's dir; all work happens in `do_work`."""

    def __init__(
        self, aeron_dir: str | os.PathLike, *, driver_timeout_ms: int = DRIVER_TIMEOUT_MS, name: str = "collapsar"
    ):
        lib = _library()
        self.errors: list[tuple[int, str]] = []
        self.driver_lost = False
        self._resources: list[Publication | Subscription] = []
        self._on_error = _ffi.callback("void(void *, int, const char *)", self._record_error)
        ctx = _ffi.new("aeron_context_t **")
        if lib.aeron_context_init(ctx) < 0:
            raise _failure("aeron_context_init")
        self._ctx = ctx[0]
        self._client = _ffi.NULL
        try:
            for ok in (
                lib.aeron_context_set_dir(self._ctx, str(aeron_dir).encode()),
                lib.aeron_context_set_driver_timeout_ms(self._ctx, driver_timeout_ms),
                lib.aeron_context_set_client_name(self._ctx, name.encode()),
                lib.aeron_context_set_error_handler(self._ctx, self._on_error, _ffi.NULL),
                lib.aeron_context_set_use_conductor_agent_invoker(self._ctx, True),
            ):
                if ok < 0:
                    raise _failure("aeron_context_set_*")
            client = _ffi.new("aeron_t **")
            if lib.aeron_init(client, self._ctx) < 0:
                raise _failure(f"connecting to the media driver in {aeron_dir}")
            self._client = client[0]
            if lib.aeron_start(self._client) < 0:
                raise _failure("aeron_start")
        except AeronError:
            self.close()
            raise
        _open_clients.add(self)

    def _record_error(self, _clientd, errcode: int, message) -> None:
        text = _ffi.string(message).decode(errors="replace")
        self.errors.append((errcode, text))
        if errcode == _ERROR_DRIVER_TIMEOUT:
            self.driver_lost = True
        log.warning("aeron client error %d: %s", errcode, text)

    @property
    def closed(self) -> bool:
        return self._client == _ffi.NULL

    def do_work(self) -> int:
        """One conductor duty cycle: keepalives, driver responses, timeouts."""
        if self.closed:
            raise AeronError("the Aeron client is closed")
        lib = _library()
        work = lib.aeron_main_do_work(self._client)
        if lib.aeron_is_closed(self._client):
            self.driver_lost = True
        return work

    def add(self, kind: str, channel: str, stream_id: int, timeout_s: float = 5.0):
        """Ask the driver for a "publication" or "subscription" and wait for it."""
        lib = _library()
        pending = _ffi.new(f"aeron_async_add_{kind}_t **")
        if kind == "publication":
            started = lib.aeron_async_add_publication(pending, self._client, channel.encode(), stream_id)
            poll = lib.aeron_async_add_publication_poll
        else:
            started = lib.aeron_async_add_subscription(
                pending, self._client, channel.encode(), stream_id, _ffi.NULL, _ffi.NULL, _ffi.NULL, _ffi.NULL
            )
            poll = lib.aeron_async_add_subscription_poll
        if started < 0:
            raise _failure(f"{kind} {channel} stream {stream_id}")
        out = _ffi.new(f"aeron_{kind}_t **")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.do_work()
            state = poll(out, pending[0])
            if state < 0:
                raise _failure(f"{kind} {channel} stream {stream_id}")
            if state > 0:
                resource = (Publication if kind == "publication" else Subscription)(out[0], channel, stream_id)
                self._resources.append(resource)
                return resource
            time.sleep(0.001)
        raise AeronError(f"{kind} {channel} stream {stream_id}: no answer from the media driver in {timeout_s} s")

    def add_publication(self, channel: str, stream_id: int, timeout_s: float = 5.0) -> Publication:
        return self.add("publication", channel, stream_id, timeout_s)

    def add_subscription(self, channel: str, stream_id: int, timeout_s: float = 5.0) -> Subscription:
        return self.add("subscription", channel, stream_id, timeout_s)

    def close(self) -> None:
        """Close publications, subscriptions and the client (idempotent)."""
        lib = _library()
        # After a driver timeout the client has already torn its resources down.
        lost = self.driver_lost or (not self.closed and lib.aeron_is_closed(self._client))
        for resource in reversed(self._resources):
            resource.release(close_handle=not lost)
        self._resources.clear()
        if not self.closed:
            lib.aeron_close(self._client)
            self._client = _ffi.NULL
        if self._ctx is not None:
            lib.aeron_context_close(self._ctx)  # the client never frees its context
            self._ctx = None
        _open_clients.discard(self)


class Publication:
    def __init__(self, handle, channel: str, stream_id: int):
        self._handle, self.channel, self.stream_id = handle, channel, stream_id

    def offer(self, payload: bytes) -> bool:
        """True once queued; False when nobody listens yet or the log is busy."""
        if self._handle is None:
            raise AeronError(f"offer on closed publication {self.channel}")
        position = _library().aeron_publication_offer(self._handle, payload, len(payload), _ffi.NULL, _ffi.NULL)
        if position >= 0:
            return True
        if position in _OFFER_RETRY:
            return False
        reason = _OFFER_FATAL.get(position, f"code {position}")
        raise _failure(f"offer of {len(payload)} bytes on {self.channel} ({reason})")

    def is_connected(self) -> bool:
        return self._handle is not None and bool(_library().aeron_publication_is_connected(self._handle))

    def release(self, close_handle: bool) -> None:
        """Close the handle (unless the client already did) and free what it holds."""
        if self._handle is not None and close_handle:
            _library().aeron_publication_close(self._handle, _ffi.NULL, _ffi.NULL)
        self._handle = None


class Subscription:
    def __init__(self, handle, channel: str, stream_id: int):
        self._handle, self.channel, self.stream_id = handle, channel, stream_id
        self._batch: list[bytes] = []
        # The driver may reuse a fragment's memory after the callback: copy now.
        self._on_message = _ffi.callback(
            "void(void *, const uint8_t *, size_t, aeron_header_t *)",
            lambda _c, buf, length, _h: self._batch.append(_ffi.buffer(buf, length)[:]),
        )
        assembler = _ffi.new("aeron_fragment_assembler_t **")
        if _library().aeron_fragment_assembler_create(assembler, self._on_message, _ffi.NULL) < 0:
            raise _failure("aeron_fragment_assembler_create")
        self._assembler = assembler[0]

    def poll(self, fragment_limit: int = 256) -> list[bytes]:
        """Messages that arrived since the last poll (whole, copied)."""
        if self._handle is None:
            raise AeronError(f"poll on closed subscription {self.channel}")
        lib = _library()
        self._batch = []
        handler = _ffi.addressof(lib, "aeron_fragment_assembler_handler")
        if lib.aeron_subscription_poll(self._handle, handler, self._assembler, fragment_limit) < 0:
            raise _failure(f"poll of {self.channel}")
        return self._batch

    def image_count(self) -> int:
        return 0 if self._handle is None else _library().aeron_subscription_image_count(self._handle)

    def release(self, close_handle: bool) -> None:
        """Close the handle (unless the client already did) and free what it holds."""
        lib = _library()
        if self._handle is not None and close_handle:
            lib.aeron_subscription_close(self._handle, _ffi.NULL, _ffi.NULL)
        self._handle = None
        if self._assembler is not None:
            lib.aeron_fragment_assembler_delete(self._assembler)
            self._assembler = None
