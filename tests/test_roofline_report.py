"""The Roofline page's plain parts and `decodelab report roofline`: ceilings of two machines in one
chart, sentences generated from the figures, a misfit named with its size, the report's Markdown
and HTML from a real run, its error path, and the machines report's roofs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis import machines_report, roofline, roofline_conclusions, theme
from analysis.roofline_report import build, render
from tests.conftest import ROOT, copy_store, run_decodelab


def roof(scale: float) -> dict[str, Any]:
    rates = {"median": 1e11 * scale, "low": 9e10 * scale, "high": 1.1e11 * scale}
    bandwidth = {"median": 5e10 * scale, "low": 4e10 * scale, "high": 6e10 * scale}
    return {
        "instruction_set": "avx512",
        "peak_operations_per_second": {precision: rates for precision in ("fp32", "bf16", "int8")},
        "bandwidth": {
            level: {"working_set_bytes": 1, "one_thread": bandwidth, "all_threads": bandwidth}
            for level in ("L1", "L2", "L3", "DRAM")
        },
    }


def placed_point(**changes: Any) -> dict[str, Any]:
    point = {
        "experiment": "kv_cache",
        "case": "fast n=64",
        "impl": "fast",
        "kernel": "float32",
        "side": "cached step",
        "intensity": 0.5,
        "bytes_per_token": 2.4e6,
        "flops_per_token": 1.2e6,
        "achieved_flops_per_second": 3e10,
        "achieved_bytes_per_second": 6e10,
        "working_set_bytes": 2.45e6,
        "level": "L3",
        "regime": "memory-bound",
        "roof_fraction": 0.59,
        "predicted_us_per_token": 50.0,
        "measured_us_per_token": 40.0,
        "prediction_error": 0.25,
    }
    return {**point, **changes}


def test_the_chart_holds_both_machines_roofs_and_the_points() -> None:
    ceilings = pd.concat([roofline.ceilings(roof(1.0), "here"), roofline.ceilings(roof(0.5), "there")])
    spec = roofline.roofline_chart(ceilings, pd.DataFrame([placed_point()])).to_dict()
    lines, dots = spec["layer"]
    assert lines["encoding"]["strokeDash"]["field"] == "machine"
    assert dots["encoding"]["fill"]["field"] == "regime"
    # Every regime's fill differs from every ceiling's line colour, whatever the ceilings are called.
    two_machines = [f"{level} {rate} GB/s" for level in ("L1", "L2", "L3", "DRAM") for rate in (17, 380)]
    # Past the palette's 22 colours two ceilings share one, still none of a regime's.
    many = [f"{level} {rate} GB/s" for level in ("L1", "L2", "L3", "DRAM") for rate in range(10, 90, 10)]
    for level_names in (["L3 30 GB/s", "L1 300 GB/s"], two_machines, many):
        renamed = ceilings.assign(ceiling=[level_names[i % len(level_names)] for i in range(len(ceilings))])
        points = pd.DataFrame([placed_point(regime=regime) for regime in roofline.REGIMES])
        layers = roofline.roofline_chart(renamed, points).to_dict()["layer"]
        line_colours = set(layers[0]["encoding"]["color"]["scale"]["range"])
        fills = layers[1]["encoding"]["fill"]["scale"]["range"]
        assert len(set(fills)) == len(roofline.REGIMES) and not line_colours & set(fills), level_names
    rows = [row for data in spec["datasets"].values() for row in data]
    assert {row.get("machine") for row in rows if "ceiling" in row} == {"here", "there"}
    # The bandwidth line stops at the compute peak: the roofline's knee.
    here = ceilings[(ceilings["machine"] == "here") & (ceilings["kind"] == "bandwidth")]
    assert here["flops_per_second"].max() == 1.1e11
    assert roofline.roof_rows({"here": roof(1.0), "there": roof(0.5)})[0] == ["roof", "here", "there"]


def test_each_ceiling_keeps_its_own_colour_on_every_machine() -> None:
    """A ceiling is coloured by what it is (a cache level, a precision's peak), not by its text:
    seven kinds, seven colours, the same level the same colour on two machines, none a regime's."""
    ceilings = pd.concat([roofline.ceilings(roof(1.0), "here"), roofline.ceilings(roof(0.5), "there")])
    scale = roofline.roofline_chart(ceilings, pd.DataFrame([placed_point()])).to_dict()["layer"][0]["encoding"]
    colours = dict(zip(scale["color"]["scale"]["domain"], scale["color"]["scale"]["range"], strict=True))
    by_kind: dict[str, set[str]] = {}
    for name, colour in colours.items():
        by_kind.setdefault(name.split(" ")[0], set()).add(colour)
    assert all(len(kind_colours) == 1 for kind_colours in by_kind.values()), by_kind
    assert len({colour for kind_colours in by_kind.values() for colour in kind_colours}) == len(by_kind)
    assert not set(colours.values()) & set(theme.REGIME_COLORS.values())
    odd = roofline.ceiling_scale(["L2 150 GB/s", "HBM 900 GB/s"])
    assert odd.range[0] not in [*roofline.CEILING_COLORS.values(), *theme.REGIME_COLORS.values()]


def test_sentences_come_from_the_figures() -> None:
    placed = pd.DataFrame([placed_point(), placed_point(impl="static", case="static n=64", prediction_error=-0.5)])
    sentences = roofline_conclusions.conclusions(placed, pd.DataFrame(), pd.DataFrame(), "box")
    assert sentences[0].startswith("On box the fast fp32 step (kv_cache, fast n=64) is memory-bound")
    assert "at 59% of the roof" in sentences[0]
    assert "the roofline predicted 50.0 µs per token, 25% above the measured 40.0" in sentences[0]
    assert sentences[-1] == "Median |prediction error| per impl over every placed figure: fast 25%, static 50%."
    speculative = pd.DataFrame(
        {
            "impl": ["fast", "fast"],
            "k": [1, 4],
            "verify_cost_ratio": [1.3, 2.5],
            "roofline_predicted_verify_cost_ratio": [1.2, 2.4],
            "roofline_break_even_acceptance": [0.4, 0.8],
            "roofline_predicted_speedup": [0.9, 0.8],
            "speedup_median": [0.95, 0.85],
        }
    )
    sentence = roofline_conclusions.speculative_sentence(speculative)
    assert sentence is not None
    assert "a 5-position verification costs 2.50 steps (the roofline says 2.40)" in sentence
    assert "acceptance above 0.80" in sentence and "says speculative decoding loses" in sentence


def test_a_model_that_does_not_fit_is_named_with_its_size() -> None:
    placed = pd.DataFrame([placed_point(prediction_error=0.1)])
    calibrated = pd.DataFrame(
        [{"impl": "fast", "seconds_cache": 1.0, "predicted_seconds_cache": 1.1, "seconds_no_cache": 14.0,
          "predicted_seconds_no_cache": 145.0}]
    )  # fmt: skip
    summary = roofline_conclusions.fit_summary(placed, calibrated)
    assert summary.set_index(["model", "side"])["fits"].to_dict() == {
        ("overhead a + b·mults", "cached step"): True,
        ("overhead a + b·mults", "no-cache step"): False,
        ("roofline", "cached step"): True,
    }
    warning = roofline_conclusions.misfit_warning(summary, "measured against predicted")
    assert warning is not None
    # Which figure and group, by how much, why it matters and what to do, in one warning.
    assert warning.startswith(
        'The time models do not fit 1 of 3 groups in the fit table (not drawn in "measured against predicted") '
        "(overhead a + b·mults: fast no-cache step); worst, the overhead a + b·mults model predicts the fast "
        "no-cache step 10.4× too slow (median |error| 936% over 1 points). Why it matters:"
    )
    assert "What to do: measure the roof with the machine idle (`decodelab machine profile`)" in warning
    assert roofline_conclusions.misfit_warning(summary[summary["fits"]], "measured against predicted") is None


@pytest.mark.slow
def test_the_roofline_report_from_a_real_run(filled_store_url: str, tmp_path: Path) -> None:
    from store.store import Store

    url = copy_store(filled_store_url, tmp_path / "report.db")
    store = Store(url)
    built = build(store, 1)
    assert built.roof is not None and not built.points.empty
    assert set(built.points["experiment"]) == {"kv_cache", "overhead", "quantization"}
    markdown = render(built, "md")
    assert markdown.startswith(f"# decodelab: run 1 on {built.machine}'s roofline")
    # The conclusions carry the machine's name, so each is escaped whole (a `|` reads as `\|`).
    assert "| experiment | case | side | regime |" in markdown and "Median \\|prediction error\\|" in markdown
    out = tmp_path / "roofline.html"
    result = run_decodelab("report", "roofline", "--run", "1", "--out", str(out), "--db", url, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert "<svg" in page and "Placed figures" in page
    missing = run_decodelab("report", "roofline", "--run", "9", "--out", str(out), "--db", url, cwd=ROOT)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"error: --run: no run 9 in {url}"]
    machines = machines_report.build_machines_report(store, "tiny", [built.machine])
    assert list(machines.roofs) == [built.machine]
    assert "## Roofs" in machines_report.render(machines, "md")


def test_the_sentence_names_the_cost_that_decides_and_the_acceptance_needed() -> None:
    """With the loop's own costs priced, per impl: the pass of the draft the roofline predicts
    fastest in plain steps, its largest part named, the break-even acceptance; an eager target
    is said to be withheld."""
    speculative = pd.DataFrame(
        {
            "impl": ["fast", "fast", "static"],
            "draft": ["fast_int8", "bigram", "bigram"],
            "k": [4, 4, 4],
            "verify_cost_ratio": [2.5, 2.5, None],
            "roofline_predicted_verify_cost_ratio": [2.2, 2.2, None],
            "roofline_step_seconds": [40e-6, 40e-6, None],
            "roofline_verify_seconds": [88e-6, 88e-6, None],
            "roofline_draft_call_seconds": [20e-6, 10e-6, None],
            "predicted_mean_draft_calls": [4.0, 4.0, None],
            "mean_draft_length": [3.8, 4.0, None],
            "roofline_loop_overhead_fit_seconds": [40e-6, 40e-6, None],
            "roofline_break_even_acceptance": [0.93, 0.97, None],
            "roofline_predicted_speedup": [0.8, 0.6, None],
            "speedup_median": [0.75, 0.58, 1.3],
            "roofline_speculative_withheld": [None, None, 0],
        }
    )
    sentence = roofline_conclusions.speculative_sentence(speculative, "epyc")
    assert sentence is not None
    # fast_int8: verification 2.2 steps, drafts 4 × 0.5 = 2.0, loop 1.0: 5.2 steps a pass.
    assert sentence.startswith(
        "On epyc's fast impl a speculative pass with its best draft (fast_int8, k=4) costs 5.20 plain steps "
        "(verification 2.20, draft 2.00, loop's own overhead 1.00): the verification decides, and drafts "
        "need an acceptance above 0.93 to win (k=4, each proposal kept alike); the roofline says speculative "
        "decoding loses here (best 0.80×), measured it loses."
    )
    assert "On the static impl the roofline predicts no speculative speedup: an eager verification" in sentence
    # A run that recorded its measured plain step counts the pass in it, the step the speedup is over
    # (roofline_placement.LoopParts): 50 us measured against the roof's 40 makes each part 0.8 as many steps.
    measured = roofline_conclusions.speculative_sentence(speculative.assign(target_step_seconds=50e-6), "epyc")
    assert measured is not None
    assert "costs 4.16 plain steps (verification 1.76, draft 1.60, loop's own overhead 0.80)" in measured
    # A run that timed its draft turns pays the turn's fixed part once a pass, in the draft's share.
    turned = roofline_conclusions.speculative_sentence(
        speculative.assign(roofline_draft_turn_fixed_seconds=[8e-6, 8e-6, float("nan")]), "epyc"
    )
    assert turned is not None
    assert "costs 5.40 plain steps (verification 2.20, draft 2.20, loop's own overhead 1.00)" in turned
    # A fitted overhead below zero (Zen 5's compiled loop) is said to be the roof's pricing, not a cost.
    below = roofline_conclusions.speculative_sentence(speculative.assign(roofline_loop_overhead_fit_seconds=-10e-6))
    assert below is not None
    assert "loop's own overhead -0.25 (below zero: the roof prices the other parts above what they took))" in below


def test_a_quantized_kernel_slower_than_fp32_reads_slower() -> None:
    """ "run 0.81× faster than fp32" read as a speedup on a user's tour."""
    quantized = pd.DataFrame(
        {
            "kernel": ["float32", "fast_int8", "fast_bf16"],
            "level": ["L2", "L2", "L2"],
            "regime": ["memory-bound"] * 3,
            "roof_fraction": [0.8, 0.5, 0.6],
        }
    )
    cases = pd.DataFrame({"kernel": ["fast_int8", "fast_bf16"], "speedup_vs_fp32": [0.81, 1.86]})
    sentence = roofline_conclusions.quantization_sentence(quantized, cases)
    assert sentence is not None and "faster than" not in sentence
    assert (
        "fast_int8 weights work from L2 (memory-bound, 50% of the roof) and run 0.81× as fast as fp32 (slower)"
        in sentence
    )
    assert "run 1.86× as fast as fp32 (faster)" in sentence
