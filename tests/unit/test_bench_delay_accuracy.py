"""`lab bench faults`' one-way accuracy lines: error against the in-run baseline, the floor, the ratio."""
from lab.bench.faults import one_way_lines

SENT = {"loads": [0, 2], "asked_ms": [100.0], "loadavg": {"0": 1.5, "2": 3.5}}


def test_error_is_against_the_same_loads_baseline_and_the_floor_is_judged_at_100_ms():
    got = {"base/0": [0.1] * 50, "0/1/100": [100.6] * 50, "0/0/100": [100.1] * 45 + [110.1] * 5,
           "base/2": [0.3] * 50, "2/1/100": [100.8] * 50}
    text = "\n".join(one_way_lines(SENT, got))
    assert "load average 1.5: no-fault one-way p50 0.100" in text
    assert "real-time worker   100 ms asked, n=50: added p50 100.50 ms" in text
    assert "error p50 +0.500 p99 +0.500 max +0.500 ms, 0 over +2 ms (floor |p99| <= 2 ms: met)" in text
    assert "max +10.000 ms, 5 over +2 ms (floor |p99| <= 2 ms: NOT met)" in text
    assert "error p99, ordinary over real-time worker: 100 ms 20.0x" in text
    assert "+2 busy processes (one per core), load average 3.5: no-fault one-way p50 0.300" in text
    assert "ordinary worker   100 ms: nothing received" in text        # load 2 had no ordinary datagrams


def test_a_part_not_run_prints_nothing_and_a_failed_one_its_error():
    assert one_way_lines({}, {}) == []
    assert one_way_lines({"error": "nfqueue 31000: refused"}, {}) == [
        "accuracy one-way (UDP, kernel receive stamps): not measured: nfqueue 31000: refused"]
