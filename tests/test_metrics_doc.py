"""The docs' metric table is the catalogue's: generated from runner/metrics.py, kept in step."""

from __future__ import annotations

import pytest

from runner import metrics_doc
from runner.metrics import catalogue


def test_the_docs_metric_table_is_the_catalogue() -> None:
    document = metrics_doc.DOCS.read_text()
    assert metrics_doc.with_table(document) == document, "run: python -m runner.metrics_doc"
    for metric in catalogue():
        assert f"| `{metric.name}` | {metric.unit} | {metric.kind} |" in document, metric.name


def test_a_document_without_the_markers_is_refused_and_a_changed_catalogue_shows() -> None:
    with pytest.raises(ValueError, match="markers"):
        metrics_doc.with_table("# no table here\n")
    stale = f"{metrics_doc.BEGIN}\n\n| metric |\n\n{metrics_doc.END}\n"
    assert metrics_doc.with_table(stale) != stale
