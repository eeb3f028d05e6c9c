"""The machine's roof: the quick profile's figures positive and ordered, the cache sizes read from
the OS, `decodelab machine profile` storing what it prints, and a run profiling its machine first
and placing every timed case on that roof with the cost module's exact counts."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from runner.cost import machine_profile, roofline_model
from store import frames
from tests.conftest import ROOT, run_decodelab


@pytest.fixture(scope="module")
def quick_profile() -> dict[str, Any]:
    return machine_profile.profile(quick=True)


def test_quick_profile_is_positive_and_ordered(quick_profile: dict[str, Any]) -> None:
    for precision in machine_profile.PRECISIONS:
        rates = quick_profile["peak_operations_per_second"][precision]
        assert 0 < rates["low"] <= rates["median"] <= rates["high"], precision
    bands = [quick_profile["bandwidth"][level] for level in roofline_model.LEVELS]
    sizes = [band["working_set_bytes"] for band in bands]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    for threads in ("one_thread", "all_threads"):
        for band in bands:
            assert 0 < band[threads]["low"] <= band[threads]["median"] <= band[threads]["high"]
    # A nearer level reads at least as fast as a farther one, within the bands over repeats (all
    # threads too, on a machine shared with other work the band is what can be promised). A VM may
    # report the host's whole L3, which then holds the DRAM working set too: no order between them.
    last_level = quick_profile["caches"]["L3"]
    for nearer, farther in zip(bands, bands[1:], strict=False):
        if farther is bands[-1] and farther["working_set_bytes"] <= last_level:
            continue
        assert nearer["one_thread"]["high"] >= farther["one_thread"]["low"]
    assert bands[0]["one_thread"]["median"] > bands[-1]["one_thread"]["median"]
    assert all(row["bytes_per_second"] > 0 for row in quick_profile["sweep"])
    assert quick_profile["profile_seconds"] > 0  # its time is the benchmark's to judge, not a test's


def test_probe_buffers_are_line_aligned_and_the_decodes_working_sets_are_measured(
    quick_profile: dict[str, Any],
) -> None:
    # Sizes that are no multiple of 64 bytes too: the address is aligned whatever the length.
    for floats in (1, 7, 128, 1000, 4096 + 3):
        owner, address = machine_profile.aligned_floats(floats)
        assert address % machine_profile.ALIGNMENT_BYTES == 0, floats
        assert ctypes.addressof(owner) <= address < ctypes.addressof(owner) + machine_profile.ALIGNMENT_BYTES
        assert ctypes.string_at(address, 4 * floats) == b"\x01" * (4 * floats)  # every page written
    assert machine_profile.alignment_of(3 * 64) == 64 and machine_profile.alignment_of(48) == 16
    # Every buffer the profile read was at least line aligned, and it read at the decode's own
    # working sets rather than interpolating between swept sizes.
    assert quick_profile["read_alignment_bytes"] >= 64
    swept = {row["working_set_bytes"] for row in quick_profile["sweep"]}
    decode_sizes = quick_profile["decode_working_sets"]
    assert decode_sizes == roofline_model.decode_working_sets()
    assert set(decode_sizes.values()) <= swept
    # The quick model's float32 step after 128 cached tokens: its parameters and its K/V cache.
    shape = roofline_model.QUICK_SHAPE
    assert decode_sizes["quick_fp32_at_128"] == roofline_model.parameter_bytes(
        shape, "fast", "fp32"
    ) + roofline_model.cache_bytes(shape, 129)
    for row in quick_profile["sweep"]:
        if row["working_set_bytes"] in decode_sizes.values():
            assert (
                roofline_model.bandwidth_at(row["working_set_bytes"], quick_profile["sweep"]) == row["bytes_per_second"]
            )


def test_no_stored_roof_fraction_exceeds_the_roof(filled_store_url: str) -> None:
    """A hard roof: no timed decode of a real run is placed above it (5% for the bands of timing).
    Nothing is clamped where it is stored, so a fraction above 1.05 means the roof is wrong."""
    from store.store import Store

    fractions = []
    for experiment in ("kv_cache", "overhead", "quantization"):
        rows = frames.measurements(Store(filled_store_url), 1, experiment)
        fractions += rows[rows["metric"].str.startswith("roof_fraction")]["value"].tolist()
    assert fractions and all(0 < fraction <= 1.05 for fraction in fractions), max(fractions)


def test_cache_sizes_come_from_the_os(tmp_path: Path) -> None:
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "64K"), (2, "Unified", "2048K"), (3, "Unified", "32M")]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert machine_profile.cache_sizes(tmp_path) == {"L1": 48 * 1024, "L2": 2 * 1024**2, "L3": 32 * 1024**2}
    working_sets = machine_profile.level_working_sets(machine_profile.cache_sizes(tmp_path), quick=True)
    assert working_sets == {"L1": 24 * 1024, "L2": 1024**2, "L3": 8 * 1024**2, "DRAM": 64 * 1024**2}


def test_the_profile_command_prints_and_stores_its_figures(tmp_path: Path) -> None:
    from store.store import Store

    url = f"sqlite:///{tmp_path / 'profile.db'}"
    result = run_decodelab("machine", "profile", "--quick", "--db", url, cwd=ROOT, DECODELAB_MACHINE="probe")
    assert result.returncode == 0, result.stderr
    printed = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line and " " not in line)
    stored = Store(url).profiles.by_machine_name()["probe"]
    assert float(printed["peak_fp32_operations_per_second"]) == pytest.approx(
        stored["peak_operations_per_second"]["fp32"]["high"], rel=1e-3
    )
    assert float(printed["dram_bytes_per_second_one_thread"]) > 0
    assert "L1 read GB/s" in result.stdout
    # The table leads with the roof the roofline uses, the best repeat, not the median.
    fp32 = next(line for line in result.stdout.splitlines() if line.startswith("peak fp32 Gop/s"))
    assert fp32.split()[5] == f"{stored['peak_operations_per_second']['fp32']['high'] / 1e9:.1f}", fp32
    assert "(median " in fp32 and "least " in fp32


def test_a_run_profiles_its_machine_first_and_places_its_timed_cases(filled_store_url: str) -> None:
    from runner.model.gpt import ModelConfig
    from store.store import Store

    store = Store(filled_store_url)
    machine, roof = store.profiles.for_run(1)
    assert roof is not None and roof["quick"], machine
    cases = frames.measurements(store, 1, "kv_cache")
    timing = cases[cases["params"].map(lambda params: params.get("part") == "timing")]
    record = store.results.find_model(weights_hash=timing.iloc[0]["model_hash"])
    assert record is not None
    config = ModelConfig(**record.config["model"])
    shape = roofline_model.Shape.of(config)
    placed = 0
    for case_id, rows in timing.groupby("case_id"):
        values = dict(zip(rows["metric"], rows["value"], strict=True))
        params = rows.iloc[0]["params"]
        passes = roofline_model.generation_cost(shape, params["impl"], "fp32", 1, params["n"], cached=True)
        assert values["bytes_per_token"] == sum(p.bytes_moved for p in passes) / params["n"], case_id
        assert values["flops_per_token"] == sum(p.total_flops for p in passes) / params["n"]
        assert values["roof_fraction"] > 0 and values["regime"] in (0, 1, 2)
        if params["impl"] != "fast":
            continue  # priced by the overhead fit: test_eager_placements_use_the_fit_or_say_why_not
        measured = values["seconds_per_token_cache"]
        assert values["roofline_prediction_error"] == pytest.approx(
            (values["roofline_predicted_seconds_per_token"] - measured) / measured
        )
        placed += 1
    assert placed >= 2


def test_eager_placements_use_the_fit_or_say_why_not(filled_store_url: str) -> None:
    """The eager impls' placements in a real run: the overhead experiment's own points come before
    its fit (a fresh store has none), so they are withheld with that reason; the kv_cache steps
    after it are the fit's a + b · mults where it is overhead-bound and fits its own points, and
    a no-cache step (a pass of several positions) is withheld."""
    from runner.model.gpt import ModelConfig
    from store.store import Store

    store = Store(filled_store_url)
    overhead = frames.measurements(store, 1, "overhead")
    fits: dict[str, dict[str, float]] = {}
    for _, row in overhead.iterrows():
        if row["params"].get("part") == "fit":
            fits.setdefault(row["params"]["impl"], {})[row["metric"]] = row["value"]
        elif row["params"].get("impl") != "fast" and row["metric"] in (
            "roofline_predicted_seconds_per_token",
            "roofline_prediction_error",
        ):
            raise AssertionError(f"an eager overhead point was predicted before the fit: {row['metric']}")
    eager_points = overhead[
        overhead["params"].map(lambda params: params.get("part") == "point" and params.get("impl") != "fast")
        & (overhead["metric"] == "roofline_prediction_withheld")
    ]
    assert len(eager_points) > 0 and set(eager_points["value"]) == {roofline_model.NO_OVERHEAD_FIT}
    cases = frames.measurements(store, 1, "kv_cache")
    timing = cases[cases["params"].map(lambda params: params.get("part") == "timing" and params["impl"] != "fast")]
    record = store.results.find_model(weights_hash=timing.iloc[0]["model_hash"])
    assert record is not None
    shape = roofline_model.Shape.of(ModelConfig(**record.config["model"]))
    for case_id, rows in timing.groupby("case_id"):
        values = dict(zip(rows["metric"], rows["value"], strict=True))
        params = rows.iloc[0]["params"]
        fit = fits[params["impl"]]
        assert values["roofline_prediction_withheld_no_cache"] == roofline_model.EAGER_MULTI_POSITION, case_id
        assert "roofline_prediction_error_no_cache" not in values
        if fit["max_fit_error"] > roofline_model.FIT_LIMIT:
            assert values["roofline_prediction_withheld"] == roofline_model.FIT_MISSES
            continue
        passes = roofline_model.generation_cost(shape, params["impl"], "fp32", 1, params["n"], cached=True)
        if values["regime"] == roofline_model.REGIMES.index("overhead-bound"):
            intercept, slope = max(0.0, fit["overhead_seconds_per_token"]), max(0.0, fit["seconds_per_mult"])
            by_fit = sum(intercept + slope * cost.total_flops / 2 for cost in passes)
            assert values["roofline_predicted_seconds_per_token"] == pytest.approx(by_fit / params["n"])
        measured = values["seconds_per_token_cache"]
        assert values["roofline_prediction_error"] == pytest.approx(
            (values["roofline_predicted_seconds_per_token"] - measured) / measured
        )
    assert timing["case_id"].nunique() >= 2
