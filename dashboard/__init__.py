"""decodelab's Streamlit dashboard: navigation, pages, cached queries, Altair charts."""
