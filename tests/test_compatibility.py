"""Old runs are read through one compatibility step on the store's read path: params a case
gained since its run was recorded come back filled with what the run in fact used, while the
store (and an export of it) keeps them as recorded."""

from __future__ import annotations

import json
from typing import Any

from store import frames
from store.compatibility import FILLED, current_params, renamed_in
from store.records import CaseRecord, MachineRecord, MeasurementRecord
from store.store import Store

MACHINE = MachineRecord("laptop", "cpu", 2, 1, "Linux", "3.11", "2.13.0", 2, "cpu", None)

# As code from before impls, per-impl baselines, temperatures and schedules recorded them.
OLD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("kv_cache", {"part": "timing", "n": 64}, "measured_speedup"),
    ("speculative", {"part": "speculative", "draft": "bigram", "k": 2}, "speedup_median"),
    ("speculative", {"part": "choice", "drafts": ["bigram"]}, "a_priori_regret_measured"),
    ("kv_cache", {"part": "counts", "n": 64}, "mults_cache"),
]


def test_old_params_are_filled_on_the_read_path_and_kept_in_the_store(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(MACHINE), spec={}, code_version="x", model_id=None
    )
    for experiment, params, metric in OLD_CASES:
        store.results.record_case(run_id, CaseRecord(experiment, params, (MeasurementRecord(metric, 2.0, "ratio"),)))
    read = {row["metric"]: row["params"] for row in frames.measurements(store, run_id).to_dict("records")}
    assert read["measured_speedup"] == {"part": "timing", "n": 64, "impl": "static", "no_cache_impl": "static"}
    assert read["speedup_median"] == {
        "part": "speculative",
        "draft": "bigram",
        "k": 2,
        "impl": "static",
        "temperature": 1.0,
        "schedule": "fixed",
    }
    assert read["a_priori_regret_measured"] == {
        "part": "choice",
        "drafts": ["bigram"],
        "impl": "static",
        "temperature": 1.0,
    }
    assert read["mults_cache"] == {"part": "counts", "n": 64}, "a part that never had the params gains none"
    across = frames.metric_across_runs(store, "speculative", "speedup_median")
    assert across["params"].iloc[0]["schedule"] == "fixed"
    # The runner's own read (a resumed run's earlier cases) goes through the same step.
    (resumed,) = [row for row in store.results.measurements(run_id, "speculative") if row.metric == "speedup_median"]
    assert resumed.params["temperature"] == 1.0
    # The store and an export keep what was recorded.
    exported = frames.export_rows(store, run_id)
    assert {json.dumps(params, sort_keys=True) for _, params, _ in OLD_CASES} == set(exported["params"])


def test_current_params_are_returned_as_planned() -> None:
    for (experiment, part), filled in FILLED.items():
        planned = {"part": part, **{key: f"planned {key}" for key in filled}}
        assert current_params(experiment, planned) == planned
    # A newer value is never overwritten by the default.
    assert current_params("kv_cache", {"part": "timing", "impl": "fast"})["impl"] == "fast"


def test_renamed_metrics_are_read_under_their_current_names_and_the_recorded_name_kept(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    machine_id = store.results.machine_id(MACHINE)
    old_run = store.results.start_run(machine_id=machine_id, spec={}, code_version="old", model_id=None)
    new_run = store.results.start_run(machine_id=machine_id, spec={}, code_version="new", model_id=None)
    params = {"part": "speculative", "draft": "bigram", "k": 2}
    # Before the rename the component model was recorded as predicted_speedup_refined.
    for run_id, metric, value in (
        (old_run, "predicted_speedup_refined", 1.2),
        (new_run, "component_model_speedup", 1.3),
    ):
        store.results.record_case(
            run_id, CaseRecord("speculative", params, (MeasurementRecord(metric, value, "ratio"),))
        )
    old = frames.measurements(store, old_run)
    assert old[["metric", "recorded_metric", "value"]].values.tolist() == [
        ["component_model_speedup", "predicted_speedup_refined", 1.2]
    ]
    assert renamed_in(old) == {"predicted_speedup_refined": "component_model_speedup"}
    assert renamed_in(frames.measurements(store, new_run)) == {}
    across = frames.metric_across_runs(store, "speculative", "component_model_speedup")
    assert sorted(zip(across["run_id"], across["recorded_metric"], across["value"], strict=True)) == [
        (old_run, "predicted_speedup_refined", 1.2),
        (new_run, "component_model_speedup", 1.3),
    ]
    assert frames.metric_names(store, "speculative") == ["component_model_speedup"]
    (resumed,) = store.results.measurements(old_run, "speculative")
    assert resumed.metric == "component_model_speedup"
    # The store keeps the name the run recorded.
    assert set(frames.export_rows(store, old_run)["metric"]) == {"predicted_speedup_refined"}


def test_a_retired_metric_is_dropped_where_its_replacement_was_recorded_and_read_as_it_elsewhere(
    sqlite_url: str,
) -> None:
    """a_priori_regret was 0 inside its noise band in runs that also recorded the measured regret:
    no reader shows it there. Runs before the band recorded the measured regret under that name:
    read as a_priori_regret_measured, the recorded name beside it. The store keeps both."""
    from cli.recommend import recommendations

    store = Store(sqlite_url)
    machine_id = store.results.machine_id(MACHINE)
    banded, before = (
        store.results.start_run(machine_id=machine_id, spec={}, code_version="x", model_id=None) for _ in range(2)
    )
    choice = {"part": "choice", "drafts": ["bigram"], "impl": "fast", "temperature": 1.0}
    values = {
        "a_priori_choice_draft_index": 0,
        "a_priori_choice_schedule_index": 0,
        "a_priori_choice_k": 2,
        "a_priori_choice_p_min": 0.0,
        "a_priori_choice_predicted_speedup": 1.1,
        "a_priori_choice_speedup": 0.81,
        "measured_best_speedup": 0.87,
        "a_priori_regret": 0.0,  # as the banded code rounded it
        "a_priori_regret_measured": 0.06,
        "a_priori_regret_noise_band": 0.08,
        "a_priori_regret_within_noise": 1.0,
    }
    measurements = tuple(MeasurementRecord(metric, value, "ratio") for metric, value in values.items())
    store.results.record_case(banded, CaseRecord("speculative", choice, measurements))
    old_choice = {"part": "choice", "drafts": ["bigram"], "impl": "static"}
    store.results.record_case(
        before, CaseRecord("speculative", old_choice, (MeasurementRecord("a_priori_regret", 0.04, "ratio"),))
    )
    read = frames.measurements(store, banded)
    assert "a_priori_regret" not in set(read["metric"]) and len(read) == len(values) - 1
    assert list(read.index) == list(range(len(read))), "the rows left are numbered afresh"
    assert read.set_index("metric").loc["a_priori_regret_measured", "value"] == 0.06
    resumed = store.results.measurements(banded, "speculative")
    assert [row.value for row in resumed if row.metric == "a_priori_regret_measured"] == [0.06]
    (line,) = recommendations(resumed)
    assert "regret 0.06 as measured" in line and "regret 0 " not in line, line
    # Before the band: the measured regret under the old name, read under the new one and said so.
    (old,) = frames.measurements(store, before).to_dict("records")
    assert (old["metric"], old["value"], old["recorded_metric"]) == (
        "a_priori_regret_measured",
        0.04,
        "a_priori_regret",
    )
    assert [row.metric for row in store.results.measurements(before, "speculative")] == ["a_priori_regret_measured"]
    assert frames.metric_names(store, "speculative").count("a_priori_regret_measured") == 1
    assert "a_priori_regret" not in frames.metric_names(store, "speculative")
    across = frames.metric_across_runs(store, "speculative", "a_priori_regret_measured")
    assert sorted(across["value"]) == [0.04, 0.06]
    for run_id in (banded, before):
        assert "a_priori_regret" in set(frames.export_rows(store, run_id)["metric"])
