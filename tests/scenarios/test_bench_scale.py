"""The scale figures of `shufflesim bench`: the N x N job runs, and the memory of an idle
channel is the N^2 term of a deployed job's memory over N (small N here)."""

import pytest

from scenarios.bench_scale import fit_growth, idle_channel_bytes, measure


def test_the_all_to_all_job_runs_and_reports_its_size():
    run = measure(4)
    assert run["n"] == 4 and run["channels"] == 16 and run["virtual_s"] == pytest.approx(1.0)
    assert run["records"] > 0 and run["peak_gib"] > 0


def test_the_fit_separates_channels_from_subtasks_and_fixed_memory():
    runs = [{"n": n, "traced_bytes": 5_000_000 + 30_000 * n + 1_500 * n * n} for n in (32, 48, 64)]
    assert fit_growth(runs) == pytest.approx((5_000_000, 30_000, 1_500, 0), abs=1e-3)
    noisy = [dict(run, traced_bytes=run["traced_bytes"] + (-1) ** k * 1_000) for k, run in enumerate(runs)]
    assert fit_growth(noisy)[3] > 0
    with pytest.raises(ValueError, match="three sizes"):
        fit_growth(runs[:2] + [runs[1]])


def test_idle_channel_bytes_is_the_channel_term_of_deployed_jobs():
    (figure,) = idle_channel_bytes((4, 8, 12), task_managers=2)
    assert [(run["channels"], run["task_managers"]) for run in figure["runs"]] == [(16, 2), (64, 2), (144, 2)]
    assert figure["runs"][0]["traced_bytes"] < figure["runs"][1]["traced_bytes"] < figure["runs"][2]["traced_bytes"]
    fixed, per_pair, per_channel, residual_rms = fit_growth(figure["runs"])
    assert figure["value"] == round(per_channel) > 0
    assert (figure["per_subtask_pair_bytes"], figure["fixed_bytes"], figure["residual_rms_bytes"]) == (
        round(per_pair), round(fixed), round(residual_rms))
