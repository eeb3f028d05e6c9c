"""Export measurements in one long format: one row per measurement."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from store.errors import StoreError
from store.files import write_whole
from store.user_text import csv_safe

if TYPE_CHECKING:
    import pandas as pd

EXPORT_FORMATS = ("csv", "json", "parquet")


def format_of_name(path: Path) -> str | None:
    """The export format a file's name says (run.json, run.json.gz, run.csv, run.parquet), if any."""
    name = path.name.lower().removesuffix(".gz")
    return next((each for each in EXPORT_FORMATS if name.endswith(f".{each}")), None)


def compressed_name(path: Path) -> bool:
    """Whether a JSON export written to ``path`` is gzip-compressed: its name ends in .gz."""
    return path.name.lower().endswith(".gz")


def write_export(frame: pd.DataFrame, path: str | Path, export_format: str) -> int:
    """Write the long-format rows; returns how many. JSON is a list of row objects."""
    if export_format not in EXPORT_FORMATS:
        raise StoreError(f"--format: {export_format!r} is not supported (allowed: {', '.join(EXPORT_FORMATS)})")

    def write(temporary: Path) -> None:
        if export_format == "csv":
            csv_safe(frame).to_csv(temporary, index=False)
        elif export_format == "json":
            frame.to_json(temporary, orient="records", indent=1)
        else:
            frame.to_parquet(temporary, index=False)

    write_whole(Path(path), write)
    return len(frame)
