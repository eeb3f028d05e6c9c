"""How often the review's timed verdicts are wrong on this machine: false alerts over the store's
A/A review pairs (consecutive done runs of one preset with the same code, model and machine) and
recall on copies of them slowed by 5%, 10%, 25% and 50% (analysis/calibration.py).

    python benchmarks/review_calibration.py --db URL [--preset quick]

Targets with at least four quick runs in the store: review_false_alert_rate ≤ 0.01,
review_reviews_with_false_alert ≤ 0.05, review_recall_at_25pct ≥ 0.9, review_recall_at_50pct ≥ 0.99.
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
    arguments = parser.parse_args()
    store = Store(arguments.db)
    try:
        result = calibrate(store, arguments.preset)
    finally:
        store.close()
    if not result.pairs:
        print(
            f"--preset: no two consecutive done {arguments.preset} runs of one code version, model and machine "
            "in the store (run the preset twice)",
            file=sys.stderr,
        )
        return 2
    for name, value in result.figures().items():
        print(f"{name}={'nan' if value is None else f'{value:.6g}' if isinstance(value, float) else value}")
    print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
