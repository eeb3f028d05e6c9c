"""The dashboard's pages, in the order the navigation lists them: the one list the app builds its
navigation from and the tests visit. Streamlit-free and torch-free, so a test reads it without
starting a page. A page is dashboard/views/NAME.py, at the URL path NAME.

The runs' pages come first; then each experiment's pages as its declaration names them
(runner.declarations: ``pages``), in the experiments' order (Roofline and Memory are kv_cache's:
they open on a kv_cache run); then the pages of no one experiment.
An experiment's new page is its view file and a line in its own declaration, not an edit here."""

from __future__ import annotations

from dataclasses import dataclass

from runner import declarations


@dataclass(frozen=True)
class Page:
    name: str  # its file under dashboard/views/ (without .py) and its URL path
    title: str
    section: str  # the navigation's heading: "Runs" or "Experiments"


RUNS_PAGES = (
    Page("review", "Review", "Runs"),
    Page("history", "History", "Runs"),
    Page("compare", "Compare machines", "Runs"),
)
# The scale calculator reads no run, the write-ups every experiment of theirs: after the experiments' pages.
LAST_PAGES = (
    Page("scale", "Scale calculator", "Experiments"),
    Page("seeds", "The write-ups, reproduced", "Experiments"),
)
SECTIONS = ("Runs", "Experiments")


def pages() -> tuple[Page, ...]:
    """Every page, in navigation order."""
    experiments = tuple(
        Page(name, title, "Experiments") for declaration in declarations.ordered() for name, title in declaration.pages
    )
    return RUNS_PAGES + experiments + LAST_PAGES
