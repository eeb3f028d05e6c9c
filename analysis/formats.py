"""The formats a report can be written in: its own module so that the CLI checks ``--format``
before it loads the report code (pandas and the statistics), which a refused command never needs."""

from __future__ import annotations

REPORT_FORMATS = ("html", "md")
