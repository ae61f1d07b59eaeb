"""Prometheus metrics of a run, in the text format node_exporter's textfile
collector reads (``--collector.textfile.directory``; files ``*.prom``).

Two files:

* the fleet's, on the control node: ``reports/<run id>/cuda13_upgrade.prom``
  (and a copy in ``$CUDA13_METRICS_TEXTFILE_DIR`` when set), from the
  report's rows and ``run.json`` (:func:`fleet_metrics`);
* optionally one per host, on the host (``cuda13_metrics_textfile_dir``),
  from its ``result.json`` (:func:`host_metrics`).

Names and labels follow Prometheus' conventions (https://prometheus.io/docs/
practices/naming/): a ``cuda13_upgrade_`` prefix, base units in the name
(``_seconds``, ``_tokens_per_second``), an ``_info`` gauge of value 1 for
text such as the run id or a stack's versions, and a state as a label of a
gauge that is 1 for the host's state and 0 for the others (an enum, as
``kube_pod_status_phase``). The text is written by ``prometheus_client``
(``generate_latest``), so names and escaping are its own.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

PREFIX = "cuda13_upgrade"

#: Host states the fleet file always counts (0 when none), as ``result.json``
#: writes them, "not reached" with an underscore.
FLEET_STATES = ("kept", "rolled_back", "failed", "unreachable", "not_reached")

#: The stack a throughput phase measured: the old one before the switch and
#: after a rollback, the new one after the switch.
PHASE_STACK = {"baseline": "old", "rollback": "old", "candidate": "new"}

FILE_NAME = "cuda13_upgrade.prom"


def state_label(status: Any) -> str:
    """A host's status as a label value: ``"not reached"`` -> ``"not_reached"``."""
    return "_".join(str(status or "unknown").split())


def _epoch(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        value = datetime.fromisoformat(str(stamp))
    except (TypeError, ValueError):
        return None
    if value.tzinfo is None:  # Ansible's now(utc=true).isoformat() has no offset
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


class _Families:
    """A collector that yields prepared metric families (prometheus_client's
    custom-collector interface)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterable[Any]:
        return iter(self.families)


def _text(families: list[Any]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode("utf-8")


def fleet_metrics(rows: list[Mapping[str, Any]], run_id: str, record: Mapping[str, Any] | None = None) -> str:
    """The fleet file of one run.

    ``rows``: :func:`cuda13_upgrade.summary.summary_rows` rows; ``record``:
    ``run.json`` of the command (``batches``: ``{host: batch number}``,
    ``started_at``/``finished_at``: the rollout's ISO 8601 times, UTC).

    Metrics: ``cuda13_upgrade_run_info{run_id,command}``;
    ``cuda13_upgrade_hosts{state}`` (every state of :data:`FLEET_STATES`);
    ``cuda13_upgrade_batch_hosts{batch,state}``;
    ``cuda13_upgrade_rollout_duration_seconds`` and
    ``cuda13_upgrade_rollout_finished_timestamp_seconds`` (from ``record``,
    else the hosts' first start and last finish); per host
    ``cuda13_upgrade_host_duration_seconds{host}``,
    ``cuda13_upgrade_host_out_of_service_seconds{host}`` and
    ``cuda13_upgrade_host_step_duration_seconds{host,step}``.
    """
    record = record or {}
    p = PREFIX
    info = InfoMetricFamily(f"{p}_run", "The run these metrics describe.")
    info.add_metric([], {"run_id": str(run_id), "command": str(record.get("command") or "rollout")})

    hosts = GaugeMetricFamily(f"{p}_hosts", "Hosts of the run per state.", labels=["state"])
    counts = dict.fromkeys(FLEET_STATES, 0)
    for row in rows:
        state = state_label(row.get("status"))
        counts[state] = counts.get(state, 0) + 1
    for state, n in counts.items():
        hosts.add_metric([state], n)

    batches = GaugeMetricFamily(
        f"{p}_batch_hosts", "Hosts of each batch of the rollout per state.", labels=["batch", "state"]
    )
    by_batch: dict[tuple[str, str], int] = {}
    for row in rows:
        batch = (record.get("batches") or {}).get(row.get("host"))
        if batch is not None:
            key = (str(batch), state_label(row.get("status")))
            by_batch[key] = by_batch.get(key, 0) + 1
    for (batch, state), n in sorted(by_batch.items(), key=lambda item: (int(item[0][0]), item[0][1])):
        batches.add_metric([batch, state], n)

    starts = [t for t in (_epoch(r.get("started_at")) for r in rows) if t is not None]
    ends = [t for t in (_epoch(r.get("finished_at")) for r in rows) if t is not None]
    started = _epoch(record.get("started_at")) or (min(starts) if starts else None)
    finished = _epoch(record.get("finished_at")) or (max(ends) if ends else None)
    families = [info, hosts, batches]
    if started is not None and finished is not None:
        duration = GaugeMetricFamily(f"{p}_rollout_duration_seconds", "Wall time of the rollout.")
        duration.add_metric([], round(finished - started, 3))
        done = GaugeMetricFamily(
            f"{p}_rollout_finished_timestamp_seconds", "When the rollout ended (Unix time)."
        )
        done.add_metric([], round(finished, 3))
        families += [duration, done]

    host_duration = GaugeMetricFamily(
        f"{p}_host_duration_seconds", "Wall time of each host's upgrade.", labels=["host"]
    )
    out_of_service = GaugeMetricFamily(
        f"{p}_host_out_of_service_seconds",
        "Time each host was out of service (drain to undrain).",
        labels=["host"],
    )
    steps = GaugeMetricFamily(
        f"{p}_host_step_duration_seconds",
        "Duration of each step of each host's upgrade.",
        labels=["host", "step"],
    )
    for row in rows:
        host = str(row.get("host"))
        if _number(row.get("duration_s")) is not None:
            host_duration.add_metric([host], float(row["duration_s"]))
        if _number(row.get("out_of_service_s")) is not None:
            out_of_service.add_metric([host], float(row["out_of_service_s"]))
        for step, seconds in (row.get("steps") or {}).items():
            steps.add_metric([host, str(step)], float(seconds))
    return _text([*families, host_duration, out_of_service, steps])


def _accept_length(entry: Mapping[str, Any]) -> float | None:
    summary = entry.get("summary") or {}
    for key in ("accept_length", "median_accept_length"):
        value = _number(summary.get(key))
        if value is not None:
            return value
    values = sorted(
        v
        for v in (
            _number(t.get("accept_length")) for t in entry.get("trials") or [] if isinstance(t, Mapping)
        )
        if v
    )
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def host_metrics(result: Mapping[str, Any]) -> str:
    """The host's own file, from its ``result.json`` (the record of the action
    ``cuda13_result``, :mod:`cuda13_upgrade.steps.result`).

    Metrics: ``cuda13_upgrade_state{state}`` (1 for the host's state, 0 for
    the other states of :data:`FLEET_STATES` but not reached),
    ``cuda13_upgrade_stack_info{venv,torch,torch_cuda}`` (what serves now),
    ``cuda13_upgrade_throughput_tokens_per_second{profile,stack}`` (the last
    median measured of each profile on the old and the new stack; ``stack``
    ``old`` or ``new``), ``cuda13_upgrade_accept_length{profile,stack}``
    (speculative decoding's mean accept length, where the trials record it),
    ``cuda13_upgrade_out_of_service_seconds``,
    ``cuda13_upgrade_last_run_timestamp_seconds`` and
    ``cuda13_upgrade_run_info{run_id}``.
    """
    p = PREFIX
    status = state_label(result.get("status"))
    state = GaugeMetricFamily(
        f"{p}_state", "The host's state after the last run (1: this state).", labels=["state"]
    )
    for name in dict.fromkeys([s for s in FLEET_STATES if s != "not_reached"] + [status]):
        state.add_metric([name], 1 if name == status else 0)
    after = result.get("stack_after") or {}
    stack = InfoMetricFamily(f"{p}_stack", "The stack the service runs now.")
    stack.add_metric([], {k: str(after.get(k) or "") for k in ("venv", "torch", "torch_cuda")})
    run = InfoMetricFamily(f"{p}_run", "The last run that wrote these metrics.")
    run.add_metric([], {"run_id": str(result.get("run_id") or "")})

    tok_s = GaugeMetricFamily(
        f"{p}_throughput_tokens_per_second",
        "Median throughput per trial of the last measurement of each profile per stack.",
        labels=["profile", "stack"],
    )
    accept = GaugeMetricFamily(
        f"{p}_accept_length",
        "Mean accept length of speculative decoding, last measurement per profile and stack.",
        labels=["profile", "stack"],
    )
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for phase in ("baseline", "candidate", "rollback"):  # later phases replace earlier ones
        for profile, entry in ((result.get("throughput") or {}).get(phase) or {}).items():
            if isinstance(entry, Mapping):
                latest[(str(profile), PHASE_STACK[phase])] = entry
    for (profile, stack_name), entry in sorted(latest.items()):
        median = _number((entry.get("summary") or {}).get("median"))
        if median is not None:
            tok_s.add_metric([profile, stack_name], median)
        length = _accept_length(entry)
        if length is not None:
            accept.add_metric([profile, stack_name], length)
    families = [state, stack, run, tok_s, accept]
    if _number(result.get("out_of_service_s")) is not None:
        oos = GaugeMetricFamily(
            f"{p}_out_of_service_seconds", "Time out of service in the last run (drain to undrain)."
        )
        oos.add_metric([], float(result["out_of_service_s"]))
        families.append(oos)
    finished = _epoch(result.get("finished_at"))
    if finished is not None:
        last = GaugeMetricFamily(
            f"{p}_last_run_timestamp_seconds", "When the last run ended on this host (Unix time)."
        )
        last.add_metric([], round(finished, 3))
        families.append(last)
    return _text(families)


def write_textfile(directory: str | Path, text: str, name: str = FILE_NAME) -> Path:
    """Write ``text`` to ``directory/name`` atomically (a temporary file in the
    same directory, then a rename), as the textfile collector requires so it
    never reads half a file. Returns the path; raises ``OSError``."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / name
