"""The metric table of docs/experiments.md, generated from the catalogue (runner.metrics, with
each experiment's declared metrics), so the docs list exactly the metrics, units and kinds the code
records. Rewrite it after changing the catalogue or adding an experiment (a test fails while the two
differ):

    python -m runner.metrics_doc [docs/experiments.md]
"""

from __future__ import annotations

import sys
from pathlib import Path

from runner.metrics import RETIRED_METRICS, Metric, catalogue

BEGIN = "<!-- metric table: generated from runner/metrics.py by `python -m runner.metrics_doc`; do not edit -->"
END = "<!-- end of the generated metric table -->"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "experiments.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(metric: Metric) -> str:
    band = f"`{metric.band[0]}`, `{metric.band[1]}`" if metric.band else ""
    old = ", ".join(f"`{name}`" for name in metric.old_names)
    cells = [f"`{metric.name}`", metric.unit, metric.kind, metric.better or "", band, old, _cell(metric.help)]
    return "| " + " | ".join(cells) + " |"


def markdown_table() -> str:
    """Every catalogue entry, in catalogue order (runner/metrics.py's, headlines first, then each
    declared experiment's own)."""
    rows = [_row(metric) for metric in catalogue()]
    header = "| metric | unit | kind | better | band | old names | what it is |\n|---|---|---|---|---|---|---|"
    retired = [f"- `{name}` (now `{old.replacement}`): {_cell(old.why)}" for name, old in RETIRED_METRICS.items()]
    lead = "Retired names older runs recorded (the store keeps them as recorded):"
    return "\n".join([header, *rows, "", lead, "", *retired])


def with_table(document: str) -> str:
    """``document`` with the text between the markers replaced by the current table."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document lacks the markers {BEGIN!r} … {END!r}")
    return document[: start + len(BEGIN)] + "\n\n" + markdown_table() + "\n\n" + document[end:]


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    path = Path(arguments[0]) if arguments else DOCS
    path.write_text(with_table(path.read_text()))
    print(f"wrote the metric table of {path} ({len(catalogue())} metrics)")


if __name__ == "__main__":
    main()
