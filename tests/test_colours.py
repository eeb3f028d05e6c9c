"""One colour per thing, everywhere (issue 44, D2): every chart of every page and of the reports,
read back as the Vega-Lite spec it was drawn from, maps each impl, draft, precision, machine and
run (and every other coloured value) to one colour, the one analysis.theme defines."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from analysis import report, roofline_report, theme
from store import frames
from store.store import Store
from tests.test_dashboard import DASHBOARD, PAGES

COLOUR_CHANNELS = ("color", "fill", "stroke")


def colour_encodings(spec: Any) -> Iterator[dict[str, Any]]:
    """Every colour-like encoding with a field, anywhere in a (layered, concatenated) spec."""
    if isinstance(spec, dict):
        for channel in COLOUR_CHANNELS:
            encoding = spec.get("encoding", {}).get(channel)
            if isinstance(encoding, dict) and "field" in encoding:
                yield encoding
        for value in spec.values():
            yield from colour_encodings(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from colour_encodings(value)


def colour_map(specs: dict[str, dict[str, Any]]) -> dict[tuple[str, str], dict[str, set[str]]]:
    """(field, value) → colour → the charts that drew it so, for the fields of theme.DOMAINS; any
    other field (a History series, a ceiling) keyed by the chart's whole set of values too (such
    a value keeps its colour except where it would share one with another value of its chart).
    A colour field without an explicit domain and range (Vega's default scheme, which colours
    by position) fails at once."""
    seen: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for where, spec in specs.items():
        for encoding in colour_encodings(spec):
            scale = encoding.get("scale", {})
            field = encoding["field"]
            assert "domain" in scale and "range" in scale, f"{where}: {field} coloured by the default scheme"
            if field not in theme.DOMAINS:
                field = f"{field} among {', '.join(map(str, scale['domain']))}"
            for value, colour in zip(scale["domain"], scale["range"], strict=True):
                seen[(field, str(value))][colour].add(where)
    return seen


def page_specs(url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    monkeypatch.setenv("DECODELAB_DB", url)
    specs: dict[str, dict[str, Any]] = {}
    for page in [*PAGES, "review"]:
        app = AppTest.from_file(str(DASHBOARD / "views" / f"{page}.py"), default_timeout=120)
        app.run()
        assert not app.exception, [exception.value for exception in app.exception]
        for index, element in enumerate(app.get("vega_lite_chart")):
            spec = json.loads(element.proto.spec)
            specs[f"{page} #{index} {spec.get('title', '')}"] = spec
    return specs


def report_specs(url: str) -> dict[str, dict[str, Any]]:
    store = Store(url)
    try:
        runs = frames.runs(store).sort_values("run_id")
        run_id, baseline_id = (int(value) for value in runs["run_id"].tolist()[-2:])
        built = report.build_report(store, run_id, baseline_id, calibrated=False)
        specs = {f"run report #{index}": chart.to_dict() for index, chart in enumerate(built.charts)}
        machines = tuple(sorted(set(runs["machine"])))
        roof = roofline_report.build(store, run_id, machines)
        specs["roofline report"] = roof.chart().to_dict()
    finally:
        store.close()
    return specs


@pytest.mark.slow  # every page through AppTest: about 30 s
def test_a_value_has_one_colour_in_every_chart_of_every_page_and_report(
    two_machines_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = {**page_specs(two_machines_url, monkeypatch), **report_specs(two_machines_url)}
    seen = colour_map(specs)
    # The store's runs draw impls, drafts, precisions and machines: the test sees each domain.
    fields = {field for field, _ in seen}
    assert {"impl", "draft", "precision"} <= fields, fields
    assert any(value in ("alpha", "beta") for _, value in seen), "no chart coloured the two machines"
    differing = {key: {colour: sorted(where) for colour, where in colours.items()} for key, colours in seen.items()}
    differing = {key: colours for key, colours in differing.items() if len(colours) > 1}
    assert not differing, differing
    # And each is the theme's one colour (fixed for an impl, draft, precision).
    for (field, value), colours in seen.items():
        if value in theme.KNOWN_COLORS.get(field, {}):
            assert set(colours) == {theme.KNOWN_COLORS[field][value]}, (field, value, colours)


def test_a_chart_coloured_by_the_default_scheme_is_caught() -> None:
    """The check above fails on a chart that leaves its colours to Vega (the bug it guards)."""
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame({"impl": ["fast", "naive"], "x": [1, 2], "y": [1, 2]})
    broken = alt.Chart(frame).mark_point().encode(x="x:Q", y="y:Q", color="impl:N").to_dict()
    with pytest.raises(AssertionError, match="default scheme"):
        colour_map({"broken": broken})
    # Two charts that give one impl two colours are caught too.
    first = alt.Chart(frame).mark_point().encode(color=theme.color("impl", frame)).to_dict()
    second = (
        alt.Chart(frame)
        .mark_point()
        .encode(color=alt.Color("impl:N", scale=alt.Scale(domain=["fast", "naive"], range=["#000000", "#111111"])))
        .to_dict()
    )
    seen = colour_map({"first": first, "second": second})
    assert len(seen[("impl", "fast")]) == 2


def test_a_value_keeps_its_colour_whatever_else_a_chart_shows() -> None:
    def colours(field: str, values: list[str]) -> dict[str, str]:
        scale = theme.color_scale(field, values)
        return dict(zip(scale.domain, scale.range, strict=True))

    alone = colours("machine", ["laptop"])
    beside = colours("machine", ["laptop", "server", "vm"])
    assert alone["laptop"] == beside["laptop"] == theme.colour_of("machine", "laptop")
    assert colours("series", ["vm · quick · fast"]) == {
        "vm · quick · fast": theme.colour_of("series", "vm · quick · fast")
    }
    assert colours("impl", ["static", "fast"])["fast"] == theme.IMPL_COLORS["fast"]
    # Runs take the palette in their id's order: neighbouring runs never share a colour.
    assert len({theme.colour_of("run", run) for run in range(1, len(theme.PALETTE) + 1)}) == len(theme.PALETTE)
    # Within one chart two values never share a colour, even where their own colours would collide.
    many = colours("series", [f"series {index}" for index in range(len(theme.SPARE_PALETTE))])
    assert len(set(many.values())) == len(many)
