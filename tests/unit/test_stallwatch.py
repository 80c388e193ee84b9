"""The manager loop's stall watch: one report per stall, with every thread's
stack, taken with the GIL (run/stallwatch.py)."""

import threading
import time

from collapsar.manager.run.stallwatch import StallWatch


def _stuck_somewhere_recognisable(seconds: float) -> None:
    time.sleep(seconds)


def test_a_stall_is_written_once_with_every_threads_stack_and_said_when_the_loop_turns(tmp_path):
    said: list[str] = []
    path = tmp_path / "stalls.txt"
    watch = StallWatch(path, said.append, after_s=0.2)
    busy_until = time.monotonic() + 0.8
    busy = threading.Thread(
        target=lambda: [None for _ in iter(lambda: time.monotonic() < busy_until, False)], name="busy"
    )
    try:
        busy.start()
        watch.beat()
        _stuck_somewhere_recognisable(0.7)  # several watchdog rounds: still one report
        watch.beat()
    finally:
        busy.join()
        watch.close()
    text = path.read_text()
    assert text.count("Stalled for") == 1, text
    assert "_stuck_somewhere_recognisable" in text and "Thread busy" in text and "Thread MainThread" in text
    assert "stall-watch" not in text  # the watchdog leaves itself out
    assert len(said) == 1 and said[0].startswith("warning: the manager loop stood still for 0.7 s"), said
    assert said[0].endswith(f"every thread's stack is in {path}")


def test_no_stall_leaves_no_file(tmp_path):
    path = tmp_path / "stalls.txt"
    watch = StallWatch(path, print, after_s=0.2)
    for _ in range(5):
        watch.beat()
        time.sleep(0.05)
    watch.close()
    assert not path.exists()
