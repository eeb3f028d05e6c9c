"""The dashboard's pages, in the order the navigation lists them: the one list the app builds its
navigation from and the tests visit. Streamlit-free, so a test reads it without starting a page.
A page is dashboard/views/NAME.py, at the URL path NAME."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    name: str  # its file under dashboard/views/ (without .py) and its URL path
    title: str
    section: str  # the navigation's heading: "Runs" or "Experiments"


PAGES = (
    Page("review", "Review", "Runs"),
    Page("history", "History", "Runs"),
    Page("compare", "Compare machines", "Runs"),
    Page("kv_cache", "KV cache", "Experiments"),
    Page("roofline", "Roofline", "Experiments"),
    Page("memory", "Memory vs weights", "Experiments"),
    Page("quantization", "Quantization", "Experiments"),
    Page("speculative", "Speculative decoding", "Experiments"),
    Page("context_cost", "Context cost", "Experiments"),
    Page("scale", "Scale calculator", "Experiments"),
    Page("seeds", "The write-ups, reproduced", "Experiments"),
)
SECTIONS = ("Runs", "Experiments")
