"""The parser of cyclictest's histogram (tests/host_timing.py), on output in
the shape rt-tests 2.4 prints."""

import pytest
from host_timing import HISTOGRAM_US, parse_histogram

OUTPUT = """\
# /dev/cpu_dma_latency set to 0us
# Histogram
000000 000000\t000000
000001 000010\t000020
000002 000040\t000025
000003 000000\t000004
000004 000000\t000001
# Total: 000000050 000000050
# Min Latencies: 00001 00001
# Avg Latencies: 00002 00002
# Max Latencies: 00003 61234
# Histogram Overflows: 00000 00000
# Histogram Overflow at cycle number:
# Thread 0:
# Thread 1:
"""


def test_percentile_and_max_over_both_threads():
    wakeups = parse_histogram(OUTPUT)
    # 100 samples: 30 at 1 us, 65 at 2 us (95), 4 at 3 us (99): p99 is 3 us
    assert (wakeups.samples, wakeups.p99_us, wakeups.max_us) == (100, 3, 61234)


def test_overflows_count_as_beyond_the_histogram():
    text = OUTPUT.replace("# Histogram Overflows: 00000 00000", "# Histogram Overflows: 00002 00000")
    wakeups = parse_histogram(text)
    assert wakeups.samples == 102 and wakeups.p99_us == HISTOGRAM_US + 1


def test_nothing_measured_is_an_error():
    with pytest.raises(RuntimeError, match="measured nothing"):
        parse_histogram("# /dev/cpu_dma_latency set to 0us\n")
