"""Machines' measured roofs (``store.profiles``): one row per ``decodelab machine profile``, the
figures as runner.cost.machine_profile writes them; the newest profile of a machine is its roof."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.outage import survives_outages
from store.results import Sessions
from store.schema import Case, Machine, MachineProfile, Measurement, Run, utc_now


def newest_roof(session: Session, machine: Machine) -> dict[str, Any] | None:
    """The machine's newest roof, or None if it was never profiled. A fingerprint differs with the
    thread count and software versions; the roof does not, so a profile of the same host (name and
    CPU model) under another fingerprint counts too: `decodelab machine profile` runs on every
    core, a sweep on one thread, and each gets a fingerprint of its own."""
    figures = session.scalars(
        select(MachineProfile.figures)
        .join(Machine, Machine.id == MachineProfile.machine_id)
        .where(Machine.name == machine.name, Machine.cpu_model == machine.cpu_model)
        .order_by((MachineProfile.machine_id == machine.id).desc(), MachineProfile.id.desc())
        .limit(1)
    ).first()
    return dict(figures) if figures is not None else None


class Profiles:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @survives_outages
    def save(self, machine_id: int, instruction_set: str, quick: bool, figures: dict[str, Any]) -> int:
        with self._sessions.write() as session:
            row = MachineProfile(
                machine_id=machine_id,
                instruction_set=instruction_set,
                quick=quick,
                figures=figures,
                created_at=utc_now(),
            )
            session.add(row)
            session.flush()
            return row.id

    @survives_outages
    def latest(self, machine_id: int) -> dict[str, Any] | None:
        """The newest profile's figures of this machine, or None if it was never profiled."""
        with self._sessions.read() as session:
            machine = session.get(Machine, machine_id)
            return newest_roof(session, machine) if machine is not None else None

    def for_run(self, run_id: int) -> tuple[str, dict[str, Any] | None]:
        """The run's machine name and that machine's newest roof (None if never profiled)."""
        with self._sessions.read() as session:
            machine_id, name = session.execute(
                select(Machine.id, Machine.name).join(Run, Run.machine_id == Machine.id).where(Run.id == run_id)
            ).one()
        return name, self.latest(machine_id)

    @survives_outages
    def by_machine_name(self) -> dict[str, dict[str, Any]]:
        """Every profiled machine's newest figures, by machine name (a name profiled under several
        fingerprints keeps its newest profile)."""
        with self._sessions.read() as session:
            rows = session.execute(
                select(Machine.name, MachineProfile.figures)
                .join(Machine, Machine.id == MachineProfile.machine_id)
                .order_by(MachineProfile.id)
            ).all()
        return {name: dict(figures) for name, figures in rows}

    @survives_outages
    def overheads(self, machine_id: int, metric: str = "overhead_seconds_per_token") -> dict[str, float]:
        """The newest fitted per-pass overhead (seconds) per impl that this machine's runs recorded
        (the ``overhead`` experiment's intercept), by impl; or another of the fit's figures
        (``seconds_per_mult``: its slope)."""
        with self._sessions.read() as session:
            rows = session.execute(
                select(Case.params, Measurement.value)
                .join(Case, Case.id == Measurement.case_id)
                .join(Run, Run.id == Measurement.run_id)
                .where(
                    Run.machine_id == machine_id,
                    Measurement.experiment == "overhead",
                    Measurement.metric == metric,
                )
                .order_by(Run.id)
            ).all()
        return {str(params.get("impl")): float(value) for params, value in rows}

    def overhead_fits(self, machine_id: int) -> dict[str, dict[str, float]]:
        """The newest overhead fit's slope and largest error on its own points per impl (what
        prices an eager impl's steps on the roofline, runner.experiments.parts.roofline_placement)."""
        figures: dict[str, dict[str, float]] = {}
        for metric in ("seconds_per_mult", "max_fit_error"):
            for impl, value in self.overheads(machine_id, metric).items():
                figures.setdefault(impl, {})[metric] = value
        return figures
