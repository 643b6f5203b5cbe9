"""The scale figures of `shufflesim bench`: the N x N job runs, and the memory of an idle
channel is the growth of a deployed job's memory per added channel (small N here)."""

import pytest

from scenarios.bench_scale import idle_channel_bytes, measure


def test_the_all_to_all_job_runs_and_reports_its_size():
    run = measure(4)
    assert run["n"] == 4 and run["channels"] == 16 and run["virtual_s"] == pytest.approx(1.0)
    assert run["records"] > 0 and run["peak_gib"] > 0


def test_idle_channel_bytes_is_the_growth_per_added_channel():
    (figure,) = idle_channel_bytes((4, 8))
    small, large = figure["runs"]
    assert (small["channels"], large["channels"]) == (16, 64)
    assert large["traced_bytes"] > small["traced_bytes"]
    assert figure["value"] == round((large["traced_bytes"] - small["traced_bytes"]) / 48)
