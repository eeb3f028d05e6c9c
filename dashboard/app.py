"""decodelab's dashboard: navigation, the store in use, launching sweeps, their progress and
the workers that run them.

Run it with ``decodelab dashboard`` (which sets DECODELAB_DB and binds 127.0.0.1); with
``--read-only`` (DECODELAB_READ_ONLY=1) it shows no launch form and writes nothing.
"""

from __future__ import annotations

import atexit
import subprocess
from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.runs import job_label
from cli.access import AccessError, load_auth, verdict
from dashboard import data, ui
from dashboard.launch import start_worker, stop_workers
from dashboard.launch_form import QUEUED, launch_form
from dashboard.pages import SECTIONS, pages
from store import frames
from store.errors import StoreError
from store.store import Store
from store.user_text import markdown_text

# Not "pages/": Streamlit would also serve that folder as an old-style multipage app beside st.navigation.
VIEWS = Path(__file__).parent / "views"
READ_ONLY = ui.read_only()
# Workers shown in the sidebar: those seen within this many hours.
WORKERS_SEEN_WITHIN_HOURS = 1.0

st.set_page_config(page_title="decodelab", layout="wide")


@st.cache_resource(show_spinner=False)
def worker_handles() -> dict[str, subprocess.Popen[bytes]]:
    """Workers this dashboard process started, by store URL; stopped when the process exits."""
    handles: dict[str, subprocess.Popen[bytes]] = {}
    atexit.register(stop_workers, handles)
    return handles


def ensure_worker(url: str, store: Store) -> str | None:
    """With a SQLite store, start a worker unless one already serves this machine: one this
    process started, or any live worker in the store (a dashboard restarted beside its old
    worker, a terminal's). PostgreSQL stores are shared by machines that run their own."""
    if READ_ONLY or store.backend != "sqlite":
        return None
    from runner.measure.machine import machine_name

    handles = worker_handles()
    running = handles.get(url)
    if running is not None and running.poll() is None:
        return None
    machine = machine_name()
    if store.workers.live(machine):
        return f"A worker already serves machine {machine}."
    handles[url] = start_worker(url)
    return "Started a worker for this store."


def sidebar() -> None:
    url = data.store_url()
    try:
        store = data.store_for(url)
    except StoreError as error:
        st.sidebar.error(str(error))
        return
    st.sidebar.caption(f"Store: `{store.masked_url}`")
    if READ_ONLY:
        st.sidebar.caption("Read-only: this dashboard launches nothing.")
    else:
        launch_form(store, lambda: ensure_worker(url, store))
    with st.sidebar:
        jobs_panel(url)


@st.fragment(run_every=2)
def jobs_panel(url: str) -> None:
    store = data.store_for(url)
    workers_list(store)
    jobs = frames.jobs(store, limit=8)
    queued_message(jobs)
    if jobs.empty:
        st.caption("No job queued yet.")
        return
    st.caption("Jobs")
    for job in jobs.to_dict("records"):
        label = job_label(job)
        if not READ_ONLY and job["status"] in ("queued", "running"):
            cancel_button(store, int(job["job_id"]))
        done, total = int(job["cases_done"]), int(job["cases_total"])
        if job["status"] == "running" and total:
            st.progress(min(done / total, 1.0), text=f"{label} · {done}/{total}")
        elif job["status"] == "failed":
            st.error(f"{label}: {markdown_text(job['error'])}")
        else:
            run = job["run_id"]
            st.caption(label + (f" · run {int(run)}" if pd.notna(run) else ""))


def cancel_button(store: Store, job_id: int) -> None:
    """Call off a queued or running job, as `decodelab cancel JOB` does."""
    if st.button(f"Cancel job {job_id}", key=f"cancel_job_{job_id}", type="tertiary"):
        try:
            store.jobs.cancel(job_id)
        except StoreError as error:  # it ended meanwhile
            st.caption(str(error))


def queued_message(jobs: pd.DataFrame) -> None:
    """The job just launched from this session, said once while it waits in the queue and gone
    once a worker has taken it (its line below shows it from then on)."""
    if QUEUED not in st.session_state:
        return
    job_id, cases, estimate = st.session_state[QUEUED]
    status = jobs.set_index("job_id")["status"].get(job_id) if not jobs.empty else None
    if status == "queued":
        st.success(f"Job {job_id} queued: {cases} cases, {estimate}.")
    else:
        del st.session_state[QUEUED]


def workers_list(store: Store) -> None:
    """The workers `decodelab workers` lists: machine, state, job and its progress."""
    workers = frames.workers(store, seen_within_hours=WORKERS_SEEN_WITHIN_HOURS)
    if workers.empty:
        st.caption("No worker seen in the last hour.")
        return
    st.caption("Workers")
    for worker in workers.to_dict("records"):
        label = (
            f"{markdown_text(worker['machine'])} · {worker['kind']} {markdown_text(worker['name'])} · {worker['state']}"
        )
        # The job's progress is on the job's own line: two readings of it could disagree by a case.
        if pd.notna(worker["job_id"]):
            label += f" · running job {int(worker['job_id'])}"
        st.caption(label)


def require_login() -> None:
    """With Streamlit's OIDC login configured (an ``[auth]`` section in .streamlit/secrets.toml,
    docs/deploy.md), nothing is shown until the visitor has logged in, and then only to an
    account the ``allowed`` list names (when there is one). It fails closed: a secrets file that
    does not parse, or an incomplete ``[auth]``, shows nothing but that problem."""
    try:
        # The files this Streamlit reads its secrets from, [auth] included: no other list.
        settings = load_auth([Path(path) for path in st.get_option("secrets.files")])
    except AccessError as error:
        st.title("decodelab")
        st.error(f"This dashboard's login is misconfigured, so it shows nothing: {error}")
        st.stop()
        return
    # st.user lacks the key, rather than saying False, when nobody has logged in yet (and in AppTest).
    logged_in = bool(getattr(st.user, "is_logged_in", False))
    email = getattr(st.user, "email", None) if logged_in else None
    verified = getattr(st.user, "email_verified", None) if logged_in else None
    seen = verdict(settings, logged_in, email if isinstance(email, str) else None, verified)
    if seen == "log in":
        st.title("decodelab")
        st.write("This dashboard asks you to log in first.")
        st.button("Log in", on_click=st.login)
        st.stop()
    elif seen == "not allowed":
        st.title("decodelab")
        st.write("not allowed")
        st.button("Log out", on_click=st.logout)
        st.stop()


def review_is_default() -> bool:
    """The Review page opens first once the store holds two runs (a run and a baseline)."""
    try:
        return len(data.load_runs(data.store_url())) >= 2
    except StoreError:
        return False


def open_first_page() -> None:
    """The root URL: no page of its own, it moves on to the page that opens first (Review or
    History), whose own URL (/review, /history) then shows in the address bar and works as a
    link. Streamlit serves a ``default=True`` page only at the root, so no real page is the
    default; the query (``?run=3``) goes along."""
    query = [(key, value) for key in st.query_params for value in st.query_params.get_all(key)]
    st.switch_page(REVIEW if review_is_default() else HISTORY, query_params=query)


require_login()
# Every page of dashboard/pages.py, by name; the root URL (FIRST) opens Review or History.
PAGES = pages()
NAVIGATION = {page.name: st.Page(VIEWS / f"{page.name}.py", title=page.title, url_path=page.name) for page in PAGES}
REVIEW, HISTORY = NAVIGATION["review"], NAVIGATION["history"]
FIRST = st.Page(open_first_page, title="decodelab", url_path="", default=True, visibility="hidden")
sections: dict[str, list[st.Page]] = {section: [] for section in SECTIONS}
sections["Runs"].append(FIRST)
for page in PAGES:
    sections[page.section].append(NAVIGATION[page.name])
navigation = st.navigation(sections)
if navigation is FIRST:
    open_first_page()
sidebar()
navigation.run()
