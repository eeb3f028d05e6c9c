"""The review's verdicts live in analysis.review (Streamlit-free, shared with the CLI); the
pages import them from here as before."""

from __future__ import annotations

from analysis.review import *  # noqa: F403
from analysis.review import __all__  # noqa: F401
