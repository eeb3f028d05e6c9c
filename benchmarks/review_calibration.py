"""How often the review's timed verdicts are wrong on this machine: false alerts over the store's
A/A review pairs (consecutive done runs of one preset with the same code, model and machine) and
recall with slowdowns of 10%, 25% and 50% injected into the later run's real samples one case at
a time, one experiment · impl family at a time and into the whole run (analysis/calibration.py).

    python benchmarks/review_calibration.py --db URL [--preset quick] [--newest N] [--up-to RUN]
        [--drift-allowance FRACTION]

Then, per experiment · impl family, ``review_recall_group_at_10pct_<experiment>_<impl>=``,
``review_group_rows_<experiment>_<impl>=`` (its injected rows) and
``review_detectable_median_<experiment>_<impl>=``: where the review's group recall falls short,
which families could not see 10% and the change their rows could have seen.

``review_drift_judged_move_max=`` and ``_p99=`` (and per family) say how far the A/A rows judged
against a drift allowance moved (on the allowance's scale): the paired ratios without a between-run
floor, which in a fresh store are the first review's, the ones a default allowance must cover.
``--drift-allowance 0.08`` is a what-if: the reviews without a machine drift figure judged against
±8% in place of the review's default (analysis.between_runs.DEFAULT_DRIFT, ±15%), and the last
line then describes that what-if, not the Review page; a figure on one CPU is not a reason to
change the default for every machine (docs/review.md).

The last line it prints is the Review page's and the reports' calibration line for the same
pairs (the page takes the newest 3 on the run's machine up to the reviewed run: --newest 3
--up-to RUN on a one-machine store).
Targets on four quiet quick runs: review_false_alert_rate ≤ 0.01, review_reviews_with_false_alert ≤ 0.05,
review_recall_single_case_at_25pct ≥ 0.9, review_recall_single_case_at_10pct ≥ 0.5,
review_recall_group_at_10pct ≥ 0.9, review_recall_run_at_10pct ≥ 0.9, review_judged_fraction ≥ 0.95.
"""

from __future__ import annotations

import argparse
import sys

from analysis.calibration import calibrate
from store.store import Store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store's URL")
    parser.add_argument("--preset", default="quick", help="the preset whose runs are paired (default: quick)")
    parser.add_argument("--newest", type=int, default=None, help="only the newest N pairs (default: every pair)")
    parser.add_argument("--up-to", type=int, default=None, help="only pairs whose later run is RUN or older")
    parser.add_argument(
        "--drift-allowance",
        type=float,
        default=None,
        help="what if reviews without a machine drift figure allowed this fraction (default: the review's own)",
    )
    arguments = parser.parse_args()
    if arguments.newest is not None and arguments.newest < 1:
        print(f"--newest: {arguments.newest} (allowed: 1 or more)", file=sys.stderr)
        return 2
    allowance = arguments.drift_allowance
    if allowance is not None and not 0 < allowance <= 1:
        print(f"--drift-allowance: {allowance:g} (allowed: above 0, at most 1)", file=sys.stderr)
        return 2
    store = Store(arguments.db)
    try:
        result = calibrate(
            store, arguments.preset, newest=arguments.newest, up_to=arguments.up_to, drift_allowance=allowance
        )
    finally:
        store.close()
    if not result.pairs:
        print(
            f"--preset: no two consecutive done {arguments.preset} runs of one code version, model and machine "
            f"in the store{'' if arguments.up_to is None else f' up to run {arguments.up_to}'} (run the preset twice)",
            file=sys.stderr,
        )
        return 2
    # The whole review's figures, then each family's at the group target's 10%: which families are blind.
    figures = {**result.figures(), **result.family_figures("group", 0.10), **result.drift_judged_figures()}
    for name, value in figures.items():
        print(f"{name}={'nan' if value is None else f'{value:.6g}' if isinstance(value, float) else value}")
    print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
