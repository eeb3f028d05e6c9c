"""Write every report of one store through the real CLI, so that two checkouts' outputs can be
compared byte for byte: the proof that a refactoring changed no behaviour (issue 43, deliverable 5).

    python benchmarks/same_behaviour.py --db sqlite:////tmp/store.db --out /tmp/before
    python benchmarks/same_behaviour.py --db sqlite:////tmp/store.db --out /tmp/after
    python benchmarks/same_behaviour.py --compare /tmp/before /tmp/after

Run it from the checkout under test with that checkout first on PYTHONPATH; every report is made
by ``python -m cli`` in a child process, which gets the same PYTHONPATH. The store is only
read (use a copy: reading a SQLite store may still touch its -wal/-shm files).

What it writes into --out, from the store's runs (``decodelab export --format json`` lists them):
  report_run.md, report_run.html   the newest run (latest started_at) against its default baseline
  roofline.md, roofline.html       ``report roofline`` of that run
  machines.md                      ``report machines`` (every machine with a done run)
  seeds/                           ``report seeds`` of that run (seed_report.json and .md)
  stdout/recommend.txt             ``recommend`` for that run (its table is its stdout)
  deterministic.json               every run's figures of kind exact, numerical or sampled (the
                                   metric catalogue's runner.metrics.kind_of), samples included,
                                   as one sorted JSON
With --fresh-spec SPEC it also runs ``decodelab run --spec SPEC`` into a new SQLite store and writes
fresh_deterministic.json: that new run's deterministic figures, keyed by experiment, case and metric
(not by run id or time), so that measuring code, not only reporting code, is compared. Two fresh
runs of one spec on unchanged code do not agree to the last bit (training and the distribution
checks' floating sums), so --compare holds that file to the catalogue's NUMERICAL_TOLERANCE: the
same figures, the same samples, each value within it; it says how many differ in their last bits.

Each command's stdout (the CLI's "wrote FILE: ..." line, recommend's table) is kept too, in
stdout/NAME.txt. Normalised, and only this: those lines name the file written, under --out, which
differs between a "before" and an "after" folder; the --out folder is written as OUT there. The
reports themselves need no normalising: two invocations on one store write them byte-identical
(checked on unchanged code, HTML included: its inline Vega-Lite SVG charts carry no random ids).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def cli(*arguments: str, stdout: Path | None = None, out: Path | None = None) -> None:
    """Run ``python -m cli ARGUMENTS`` on this checkout; its stdout to a file if given,
    with the folder ``out`` written as OUT."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, "-m", "cli", *arguments], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"decodelab {' '.join(arguments)} exited {done.returncode}:\n{done.stderr}")
    if stdout is not None:
        stdout.write_text(done.stdout.replace(str(out), "OUT") if out is not None else done.stdout)


def exported_rows(db: str, scratch: Path) -> list[dict[str, Any]]:
    path = scratch / f"export-{len(list(scratch.iterdir()))}.json"
    cli("export", "--db", db, "--format", "json", "--out", str(path))
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    return rows


def deterministic_figures(rows: list[dict[str, Any]], *, keep_run_id: bool) -> list[dict[str, Any]]:
    """The rows whose metric the catalogue calls exact, numerical or sampled, sorted."""
    from runner.metrics import DETERMINISTIC_KINDS, kind_of

    kept = []
    for row in rows:
        kind = kind_of(row["metric"], row["unit"])
        if kind not in DETERMINISTIC_KINDS:
            continue
        figure = {
            "experiment": row["experiment"],
            "case_key": row["case_key"],
            "metric": row["metric"],
            "unit": row["unit"],
            "kind": kind,
            "value": row["value"],
            "samples": row.get("samples"),
        }
        if keep_run_id:
            figure = {"run_id": row["run_id"], "machine": row["machine"], **figure}
        kept.append(figure)
    return sorted(kept, key=identity)


def identity(figure: dict[str, Any]) -> str:
    """What a figure is (its run, experiment, case and metric), without its value."""
    return json.dumps({key: value for key, value in figure.items() if key not in ("value", "samples")}, sort_keys=True)


def write_reports(db: str, out: Path, fresh_spec: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        rows = exported_rows(db, scratch)
        started = {row["run_id"]: row["run"]["started_at"] for row in rows}
        newest = str(max(started, key=lambda run_id: started[run_id]))
        said = out / "stdout"
        said.mkdir(exist_ok=True)
        (out / "seeds").mkdir(exist_ok=True)
        for name, *arguments in (
            ("report_run_md", "report", "run", "--out", str(out / "report_run.md")),
            ("report_run_html", "report", "run", "--out", str(out / "report_run.html")),
            ("roofline_md", "report", "roofline", "--out", str(out / "roofline.md")),
            ("roofline_html", "report", "roofline", "--out", str(out / "roofline.html")),
            ("seeds", "report", "seeds", "--out", str(out / "seeds")),
            ("recommend", "recommend"),
        ):
            cli(*arguments, "--db", db, "--run", newest, stdout=said / f"{name}.txt", out=out)
        cli("report", "machines", "--db", db, "--out", str(out / "machines.md"), stdout=said / "machines.txt", out=out)
        figures = deterministic_figures(rows, keep_run_id=True)
        (out / "deterministic.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
        if fresh_spec is not None:
            fresh_db = f"sqlite:///{scratch / 'fresh.db'}"
            cli("run", "--db", fresh_db, "--spec", str(fresh_spec.resolve()))
            fresh = deterministic_figures(exported_rows(fresh_db, scratch), keep_run_id=False)
            (out / "fresh_deterministic.json").write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
    print(f"newest run {newest}: reports in {out}")


def fresh_figures_agree(before: Path, after: Path) -> tuple[bool, int]:
    """Whether two fresh runs' figures are the same figures with values within the catalogue's
    NUMERICAL_TOLERANCE (the machines audit's own rule, analysis.machines.all_close), and how many
    values differ at all."""
    from analysis.machines import all_close

    figures_before = json.loads(before.read_text())
    figures_after = json.loads(after.read_text())
    if [identity(figure) for figure in figures_before] != [identity(figure) for figure in figures_after]:
        return False, -1
    differing = 0
    for old, new in zip(figures_before, figures_after, strict=True):
        if old["samples"] != new["samples"]:
            return False, -1
        differing += old["value"] != new["value"]
        if not all_close([old["value"], new["value"]]):
            return False, differing
    return True, differing


def differing_files(before: Path, after: Path) -> list[str]:
    names = {path.relative_to(before) for path in before.rglob("*") if path.is_file()}
    names |= {path.relative_to(after) for path in after.rglob("*") if path.is_file()}
    return sorted(
        str(name)
        for name in names
        if not ((before / name).is_file() and (after / name).is_file())
        or not filecmp.cmp(before / name, after / name, shallow=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="the store's URL (a copy: it is read, never written)")
    parser.add_argument("--out", type=Path, help="folder for the reports")
    parser.add_argument("--fresh-spec", type=Path, help="also run this spec into a new store and keep its figures")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"))
    arguments = parser.parse_args()
    if arguments.compare:
        before, after = arguments.compare
        differing = differing_files(before, after)
        fresh = "fresh_deterministic.json"
        within_tolerance = 0
        if fresh in differing and (before / fresh).is_file() and (after / fresh).is_file():
            agree, count = fresh_figures_agree(before / fresh, after / fresh)
            if agree:
                differing.remove(fresh)
                within_tolerance = 1
                print(f"{fresh}: the same figures; {count} values differ, each within NUMERICAL_TOLERANCE")
        if differing:
            print("differ: " + ", ".join(differing))
            return 1
        count = sum(1 for path in before.rglob("*") if path.is_file()) - within_tolerance
        print(f"byte-identical: all {count} files of {before} and {after}" + " but that one" * within_tolerance)
        return 0
    if not arguments.db or not arguments.out:
        parser.error("--db and --out are required (or --compare DIR_A DIR_B)")
    write_reports(arguments.db, arguments.out, arguments.fresh_spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
