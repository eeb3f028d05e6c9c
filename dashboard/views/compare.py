"""Compare machines: for a preset, each machine's newest done run (or a pinned one) side by side:
fingerprints with the differing fields highlighted, a determinism audit, and one row per
headline figure with its band and its ratio to a reference machine; one figure across machines
or runs below. ``?preset=``, ``?machines=``, ``?reference=`` and ``?pin=machine:run`` hold the
choice, so a link shows the same comparison."""

from urllib.parse import quote

import pandas as pd
import streamlit as st

from analysis import machines, machines_report, roofline
from dashboard import data, one_figure, ui
from store.user_text import markdown_text

# Machines shown at first: a matrix wider than this stops being readable.
DEFAULT_MACHINES = 4


def pinned_from_url(candidates: pd.DataFrame) -> dict[str, int]:
    pinned = {}
    for value in st.query_params.get_all("pin"):
        machine, _, run = value.rpartition(":")
        run_id = ui.run_number(run)
        if run_id is not None and ((candidates["machine"] == machine) & (candidates["run_id"] == run_id)).any():
            pinned[machine] = run_id
    return pinned


def as_markdown_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its headers, index and text cells escaped: st.table reads all of them as
    Markdown, and machine names (the headers) and fingerprint fields are the runs' own text."""
    shown = frame.map(lambda cell: markdown_text(cell) if isinstance(cell, str) else cell)
    shown.columns = [markdown_text(column) for column in frame.columns]
    if frame.index.dtype == object:
        shown.index = pd.Index([markdown_text(label) for label in frame.index], name=frame.index.name)
    return shown


def highlighted(fingerprints: pd.DataFrame) -> "pd.io.formats.style.Styler":
    """The fingerprints with the rows that differ between the machines marked and shaded."""
    shown = as_markdown_text(fingerprints.drop(columns=["differs"])).assign(
        differs=fingerprints["differs"].map({True: "differs", False: ""}).tolist()
    )
    return shown.style.apply(lambda row: ["background-color: #fff3cd" if row["differs"] else "" for _ in row], axis=1)


st.title("Compare machines")
opened = ui.open_store()
if opened:
    url = opened[0]
    runs = data.load_runs(url)
    presets = machines.presets_by_machines(runs)
    if not presets:
        st.info(f"The store holds no done run yet. Fill it with `{ui.FILL_COMMAND}` on each machine.")
        st.stop()
    left, middle, right = st.columns([1, 2, 1])
    wanted_preset = st.query_params.get("preset")
    preset = left.selectbox(
        "Preset", presets, index=presets.index(wanted_preset) if wanted_preset in presets else 0, key="machines_preset"
    )
    candidates = machines.candidate_runs(runs, preset)
    available = sorted(candidates["machine"].unique())
    wanted = [m for m in st.query_params.get_all("machines") if m in available] or available[:DEFAULT_MACHINES]
    chosen = middle.multiselect("Machines (a done run of the preset on each)", available, default=wanted)
    if not chosen:
        st.info("Choose at least one machine.")
        st.stop()
    wanted_reference = st.query_params.get("reference")
    reference = right.selectbox(
        "Reference machine",
        chosen,
        index=chosen.index(wanted_reference) if wanted_reference in chosen else 0,
        key="machines_reference",
    )
    pinned = pinned_from_url(candidates)
    with st.expander("Pin a run per machine (default: the newest done run, not tagged suspect)"):
        columns = st.columns(min(len(chosen), DEFAULT_MACHINES))
        for index, machine in enumerate(chosen):
            own = candidates[candidates["machine"] == machine]
            options = own["run_id"].tolist()
            describe = {
                row["run_id"]: f"run {row['run_id']} · {pd.Timestamp(row['started_at']):%Y-%m-%d %H:%M}"
                + (f" · {row['tags']}" if row["tags"] else "")
                for row in own.to_dict("records")
            }
            picked = columns[index % len(columns)].selectbox(
                markdown_text(machine),  # a widget's label is Markdown: the machine's name is the run's text
                options,
                index=options.index(pinned[machine]) if machine in pinned else 0,
                format_func=describe.__getitem__,
                key=f"machines_pin_{machine}",
            )
            if picked == options[0]:
                pinned.pop(machine, None)
            else:
                pinned[machine] = int(picked)
    st.query_params["preset"] = preset
    st.query_params["machines"] = chosen
    st.query_params["reference"] = reference
    st.query_params["pin"] = [f"{machine}:{run}" for machine, run in sorted(pinned.items())]

    built = data.load_machines_report(url, preset, tuple(chosen), reference, tuple(sorted(pinned.items())))
    st.caption(machines_report.runs_line(built, markdown_text))
    st.subheader("Fingerprints")
    st.caption("Fields that differ between the machines are highlighted.")
    st.table(highlighted(built.fingerprints))

    st.subheader("Determinism audit")
    st.caption(machines_report.AUDIT_NOTE)
    if len(chosen) == 1:
        st.info("One machine chosen: nothing to audit it against.")
    for audit in built.audit.audits:
        if audit.differences.empty and audit.compared:
            st.success(markdown_text(audit.line()))
        else:
            st.warning(markdown_text(audit.line()))
            ui.table(audit.differences, "determinism-differences")
    for line in built.audit.left_out:
        st.info(markdown_text(line))

    st.subheader("Headline figures")
    st.caption(machines_report.MATRIX_NOTE)
    ui.table(built.wide(), "machines-matrix")
    if built.roofs:
        st.subheader("Roofs")
        st.caption(machines_report.ROOFS_NOTE)
        header, rows = roofline.roof_rows(built.roofs)
        st.table(as_markdown_text(pd.DataFrame(rows, columns=header).set_index("roof")))
        # The Roofline page with the reference machine's run and the other machines' roofs.
        others = "".join(f"&compare={quote(machine)}" for machine in chosen if machine != reference)
        st.markdown(f"[These roofs on the Roofline page](roofline?run={built.runs[reference]}{others})")
    left, right = st.columns(2)
    for column, report_format, label in ((left, "html", "HTML"), (right, "md", "Markdown")):
        column.download_button(
            f"Download the comparison ({label})",
            machines_report.render(built, report_format).encode("utf-8"),
            file_name=f"machines-{preset}.{report_format}",
            mime="text/html" if report_format == "html" else "text/markdown",
            key=f"download-machines-{report_format}",
        )

    st.divider()
    st.subheader("One figure across machines or runs")
    one_figure.show(url, runs)
