"""The sidebar's launch form: a sweep from a preset (its experiments, and only the fields those
experiments use) or from a TOML spec, with the estimate shown as the choice changes, before the
click. A thin layer over dashboard.launch, where the handling lives and is tested."""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from dashboard import ui
from dashboard.launch import (
    CONFIRM_ABOVE_SECONDS,
    LaunchRequest,
    build_spec,
    check_launch_rate,
    estimate_launch,
    form_fields,
    launch,
)
from runner.errors import InputError
from runner.model.data_folder import data_files
from runner.spec import preset_files
from store.store import Store

# Session keys: what was launched last per preset (the experiments start from it), the job just queued.
REMEMBERED = "launch_remembered_experiments"
QUEUED = "launch_queued_job"
# When this session launched, for the per-session rate (dashboard.launch.check_launch_rate).
LAUNCH_TIMES = "launch_times"


def request_fields(store: Store) -> LaunchRequest:
    """The form's fields, each shown only when it applies; returns what they describe."""
    source = st.radio("From", ["preset", "spec"], horizontal=True, key="launch_source")
    preset, experiments, spec_text = preset_files.preset_names()[0], [], ""
    lengths: list[int] = []
    ks: list[int] = []
    pairs = 0
    corpus = "default"
    if source == "preset":
        preset = st.selectbox("Preset", preset_files.preset_names(), key="launch_preset")
        available = list(preset_files.preset_experiments(preset))
        remembered = st.session_state.get(REMEMBERED, {}).get(preset, [])
        experiments = st.multiselect(
            "Experiments",
            available,
            default=[name for name in remembered if name in available],
            key=f"launch_experiments_{preset}",
            placeholder="Choose the experiments to run",
        )
        # An override shows only once a chosen experiment's declaration names it (form_fields).
        shown = form_fields(experiments)
        if "lengths" in shown:
            lengths = st.multiselect(
                "KV-cache lengths n (empty: the preset's)", [32, 64, 128, 256, 512, 1024], key="launch_lengths"
            )
        if "ks" in shown:
            ks = st.multiselect("Draft lengths k (empty: the preset's)", list(range(1, 17)), key="launch_ks")
        if "pairs" in shown:
            pairs = int(
                st.number_input(
                    "Timing pairs per point (0: the preset's)",
                    min_value=0,
                    max_value=1000,
                    value=0,
                    step=1,
                    key="launch_pairs",
                )
            )
        corpus = st.selectbox(
            "Corpus (a file of the data folder)", ["default", *data_files(ui.data_dir())], key="launch_corpus"
        )
    else:
        spec_text = st.text_area(
            "Spec (TOML; its corpus: 'default' or a file of the data folder)", height=150, key="launch_spec"
        )
    # One machine serves a SQLite store (this one); a shared store's jobs may be pinned to one.
    machine = "" if store.backend == "sqlite" else st.text_input("Machine (empty: any worker)", key="launch_machine")
    return LaunchRequest(
        source,
        preset,
        experiments,
        spec_text,
        machine,
        False,
        lengths=lengths,
        ks=ks,
        pairs=pairs or None,
        corpus=corpus,
    )


def launch_form(store: Store, started_worker: Callable[[], str | None]) -> None:
    """The form in the sidebar; ``started_worker`` starts a worker where one is needed and says so."""
    with st.sidebar:
        st.subheader("Launch a sweep")
        request = request_fields(store)
        problem, long = None, False
        try:
            spec = build_spec(request, ui.data_dir())
            estimated = estimate_launch(store, spec, request.machine.strip() or None)
        except InputError as error:
            problem = str(error)
        else:
            long = estimated.seconds > CONFIRM_ABOVE_SECONDS
            st.caption(f"{spec.cases_total()} cases, {estimated.describe()}.")
        nothing_chosen = not request.spec_text.strip() if request.source == "spec" else not request.experiments
        if nothing_chosen:  # not an error yet: say what the form waits for
            st.caption("Choose experiments (or paste a spec) to see the sweep's size and time.")
        elif problem:
            st.error(problem)
        confirmed = st.checkbox("I know this sweep is long", key="launch_confirmed") if long else True
        blocked = nothing_chosen or problem is not None or (long and not confirmed)
        clicked = st.button("Launch", disabled=blocked, key="launch_button")
    if not clicked:
        return
    try:
        recent = check_launch_rate(st.session_state.get(LAUNCH_TIMES, []), time.monotonic())
        launched = launch(store, LaunchRequest(**{**request.__dict__, "confirmed": confirmed}), ui.data_dir())
    except InputError as error:
        st.sidebar.error(str(error))
        return
    if launched.job_id is not None:
        st.session_state[LAUNCH_TIMES] = recent
    if launched.job_id is None:
        st.sidebar.warning("Tick 'I know this sweep is long' and launch again.")
        return
    if request.source == "preset":
        st.session_state.setdefault(REMEMBERED, {})[request.preset] = list(request.experiments)
    said = launched.estimate.describe() if launched.estimate else ""
    st.session_state[QUEUED] = (launched.job_id, launched.cases, said)
    started = started_worker()
    if started:
        st.sidebar.caption(started)
