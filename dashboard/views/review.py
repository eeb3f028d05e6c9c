"""Review: one run against its baseline, a verdict per headline metric (regressions first),
the run's tags and note, and the report to paste into a review. ``?run=`` and ``?baseline=``
hold the choice, so a link shows the same comparison."""

import pandas as pd
import streamlit as st

from analysis import report_render, review, review_lines
from analysis.runs import default_review_run, later_baseline, same_sweep_runs
from dashboard import data, ui
from store.annotations import KNOWN_TAGS, RESERVED_PREFIXES, check_new_tag, check_note, check_tag
from store.errors import StoreError
from store.user_text import markdown_text

# Regressions and changes spelled out above the table, the first of them.
FIRST_ROWS = 5

st.title("Review")
opened = ui.open_store()
if opened:
    url, store = opened
    runs = data.load_runs(url)
    if len(runs) < 2:
        st.info(
            f"A review sets a run beside a baseline; the store holds {len(runs)} run(s). "
            f"Run `{ui.FILL_COMMAND}` again (or launch a sweep from the sidebar) to have two."
        )
        st.stop()
    labels = {row["run_id"]: report_render.describe(row) for row in runs.to_dict("records")}
    options = runs["run_id"].tolist()  # newest first
    left, right = st.columns(2)
    wanted = ui.query_int("run")
    # Opens on like against like: the newest run with an earlier run of its spec and preset.
    opening = wanted if wanted in options else default_review_run(runs)
    run_id = left.selectbox(
        "Run", options, index=options.index(opening) if opening in options else 0, format_func=labels.__getitem__
    )
    default = review.default_baseline(runs, run_id)
    others = [option for option in options if option != run_id]
    wanted_baseline = ui.query_int("baseline")
    # Without an earlier run on its machine: a run of the same spec and preset elsewhere, before any other.
    alike = [option for option in same_sweep_runs(runs, run_id) if option in others]
    fallback = alike[0] if alike else others[0]
    chosen = wanted_baseline if wanted_baseline in others else default if default in others else fallback
    baseline_id = right.selectbox(
        "Baseline", others, index=others.index(chosen), format_func=labels.__getitem__, key="review_baseline"
    )
    st.query_params["run"] = str(run_id)
    st.query_params["baseline"] = str(baseline_id)
    if (later := later_baseline(runs, int(run_id), int(baseline_id))) is not None:
        st.warning(later)
    if default is None:
        st.caption(
            "No earlier done run of this spec and preset on this machine (not tagged suspect): the baseline "
            "shown is a run of the same spec and preset on another machine where there is one, else another "
            "run; pick the one to compare with."
        )
    elif baseline_id == default:
        st.caption(
            "Default baseline: the newest run tagged `baseline`, else the previous done run, of the same preset "
            "on the same machine fingerprint (suspect runs never)."
        )
    headline_only = not st.toggle("Every metric, not only the headline ones", key="review_all_metrics")
    state = data.review_state(runs, int(run_id), int(baseline_id))
    built = data.load_report(url, int(run_id), int(baseline_id), headline_only, state)
    table = built.table
    if review_lines.shares_no_case(table):
        for warning in built.warnings:
            if warning != later:
                st.warning(warning)
        summary = review_lines.summary_line(table)
        st.info(f"Run {run_id} against run {baseline_id}: {summary}. Pick a baseline of the same preset.")
        st.stop()
    # The page opens with what it could see, before any count: "0 regressed" from a review that
    # cannot see a 50% change is no clean bill of health.
    seen = review_lines.seen_line(table)
    if review_lines.cannot_see(table):
        st.warning(seen)
    else:
        st.info(seen)
    power = review_lines.power_line(table)
    if power:
        st.warning(power)
    # The rest of what limits the review in one box: four boxes in a row before the counts read
    # as four alarms (a first-time user's tour).
    notes = review_lines.notes_markdown([warning for warning in built.warnings if warning != later])
    if notes:
        st.warning(notes)
    counts = review_lines.verdict_counts(table)
    columns = st.columns(5)
    shown_verdicts = ("regressed", "changed", "improved", "unknown drift", "within noise")
    for column, verdict in zip(columns, shown_verdicts, strict=True):
        column.metric(verdict, counts.get(verdict, 0), help=review.VERDICT_MEANINGS[verdict])
    # Every verdict word links to its meaning below; each row's `why` says which floor, test and adjusted p.
    st.markdown("**Verdicts:** " + report_render.linked_counts(counts))
    # Filled in last: the calibration judges the machine's earlier A/A pairs again (seconds).
    calibration_slot = st.empty()
    calibration_slot.markdown("**Calibration:** measuring this machine's error rates on its earlier runs…")
    st.caption(f"Drift: {markdown_text(built.machine_drift)}")
    st.caption(f"A/A spread: {report_render.floors_line(built.floors)}. {report_render.METHOD}")
    first = table[table["verdict"].isin(["regressed", "changed"])].head(FIRST_ROWS)
    if not first.empty:
        st.markdown(
            "**Look at these first:**\n"
            + "\n".join(f"- {report_render.one_line_row(row)}" for row in first.to_dict("records"))
        )

    verdicts = [verdict for verdict in review.VERDICT_ORDER if verdict in counts]
    left, right = st.columns(2)
    chosen_verdicts = left.multiselect("Verdicts", verdicts, key="review_verdicts")
    experiments = sorted(table["experiment"].unique()) if not table.empty else []
    chosen_experiments = right.multiselect("Experiments", experiments, key="review_experiments")
    shown = table
    if chosen_verdicts:
        shown = shown[shown["verdict"].isin(chosen_verdicts)]
    if chosen_experiments:
        shown = shown[shown["experiment"].isin(chosen_experiments)]
    # A tested row's verdict says what it could have seen: "within noise (would have seen ≥ 8%)".
    shown = shown.assign(verdict=[review_lines.verdict_label(row) for row in shown.to_dict("records")])
    # A row waiting for history could see no change: its label says so, the number column stays empty.
    shown = shown.assign(detectable=shown["detectable"].astype(float).replace(float("inf"), float("nan")))
    ui.table(shown, "review", review.PAGE_COLUMNS)
    st.markdown("#### What each verdict means")
    st.markdown(report_render.meanings_markdown(), unsafe_allow_html=True)  # fixed text: the anchors the links go to
    for chart in built.charts:
        ui.chart(chart)

    st.subheader(f"Tags and note of run {run_id}")
    run = runs.set_index("run_id").loc[run_id]
    if ui.read_only():
        note = markdown_text(run["note"]) if pd.notna(run["note"]) else "none"
        st.write(f"Tags: {markdown_text(run['tags']) if run['tags'] else 'none'}. Note: {note}.")
    else:
        held = sorted(review.tag_set(run["tags"]))
        every_tag = {tag for value in runs["tags"] for tag in review.tag_set(value)}
        # Another run's ab: or rev: tag would only be refused here (check_new_tag): not offered.
        known = sorted({*KNOWN_TAGS, *held, *(tag for tag in every_tag if not tag.startswith(RESERVED_PREFIXES))})
        with st.form("annotate"):
            tags = st.multiselect("Tags", known, default=held, key=f"review_tags_{run_id}")
            extra = st.text_input("Another tag (a-z, 0-9, . _ -)", key=f"review_new_tag_{run_id}")
            note = st.text_area("Note", value=run["note"] if pd.notna(run["note"]) else "", key=f"review_note_{run_id}")
            saved = st.form_submit_button("Save tags and note")
        if saved:
            wanted_tags = set(tags) | ({extra.strip()} if extra.strip() else set())
            try:
                for tag in wanted_tags:  # every name checked before anything is written
                    # An ab: tag the run holds stays; a new one is refused (check_new_tag checks the name too).
                    (check_tag if tag in held else check_new_tag)(tag)
                check_note(note)
                for tag in sorted(wanted_tags - set(held)):
                    store.annotations.add_tag(int(run_id), tag)
                for tag in sorted(set(held) - wanted_tags):
                    store.annotations.remove_tag(int(run_id), tag)
                store.annotations.set_note(int(run_id), note)
            except StoreError as error:
                st.error(str(error))
            else:
                data.forget_runs()
                st.rerun()
        if st.button(f"Pin run {baseline_id} as a baseline (tag it `baseline`)", key="review_pin"):
            store.annotations.add_tag(int(baseline_id), "baseline")
            data.forget_runs()
            st.rerun()

    built = data.calibrated(built, data.load_calibration(url, int(run_id), state))
    calibration_slot.markdown(f"**Calibration:** {built.calibration}")
    markdown, page = st.columns(2)
    name = f"decodelab-run-{run_id}-vs-{baseline_id}"
    # Last on the page: drawing the HTML's charts takes seconds, and nothing above waits for it.
    # The files' data is given on the page (not a callable run on click): Streamlit then keeps each
    # file for as long as its button is shown. A click only downloads ("ignore"): no rerun to wait for.
    markdown.download_button(
        "Download the report (Markdown)",
        report_render.to_markdown(built),
        file_name=f"{name}.md",
        mime="text/markdown",
        key="review_download_markdown",
        on_click="ignore",
    )
    page.download_button(
        "Download the report (HTML)",
        data.load_report_html(url, int(run_id), int(baseline_id), headline_only, state),
        file_name=f"{name}.html",
        mime="text/html",
        key="review_download_html",
        on_click="ignore",
    )
