"""The network figures of `shufflesim bench` run and report consistent raw numbers (not timed)."""

import pytest

from scenarios import bench_network


def test_sim_buffer_hops_moves_every_buffer():
    (figure,) = bench_network.sim_buffer_hops(buffers=300)
    assert figure["figure"] == "sim_buffer_hops_per_s"
    assert figure["buffers"] == 300 and figure["value"] > 0
    # 300 buffers of 32 KiB at 10 Gbit/s take at least 300 x 26 us of virtual time.
    assert figure["virtual_s"] > 300 * 32768 / 1.25e9


@pytest.mark.tcp
def test_tcp_payload_ratio_between_two_processes():
    (figure,) = bench_network.tcp_payload_ratio(buffers=300, pairs=3)
    assert figure["figure"] == "tcp_payload_ratio"
    assert 0 < figure["value"] == pytest.approx(figure["payload_mb_per_s"] / figure["raw_socket_mb_per_s"], rel=0.02)
    # the value is the median of the three alternating pairs
    assert len(figure["ratios"]) == 3 and figure["value"] == sorted(figure["ratios"])[1]
