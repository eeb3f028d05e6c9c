"""The statistics of decodelab's verdicts, Streamlit-free: the CLI, the benchmarks and the
dashboard import it (it imports neither the dashboard nor Streamlit)."""
