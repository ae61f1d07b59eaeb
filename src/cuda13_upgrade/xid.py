"""The NVIDIA driver's Xid lines in the kernel log, and what each one means for the gate.

The driver reports GPU faults as ``NVRM: Xid`` lines in the kernel ring buffer
(``journalctl -k``, ``dmesg``, ``/dev/kmsg``)::

    [  365.969681] NVRM: Xid (PCI:0000:01:00): 31, pid=13705, name=UnrealEditor, channel 0x0000000c, ...
    May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.

(R470 and later write ``pid=<n>, name=<comm>,`` or ``pid='<unknown>', name=<unknown>,``
after the Xid number; older drivers write ``pid=<n>,`` or nothing.)

Classes come from NVIDIA's Xid catalog, "Analyzing Xid Errors with the Xid
Catalog", Table 1, column "Resolution Bucket (Immediate Action)"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), read through
its machine-readable copy in NVIDIA's own NVSentinel
(github.com/NVIDIA/NVSentinel ``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv``
at commit 6f8b0fcfa8e502bdda78fabf96facef729a9285b), the mapping its syslog
health monitor acts on. The gate reads them so:

* **gate** (roll back): the catalog's immediate action is a GPU reset
  (``RESET_GPU``), a node reboot (``RESTART_BM``, ``RESTART_VM``) or a
  hardware workflow (``WORKFLOW_XID_48`` for a double-bit ECC error, the NVLink
  workflows), or the Xid is one the catalog marks unused/unexpected
  (``CONTACT_SUPPORT``, shown as ``UNEXPECTED_ERR_REPORT_ISSUE``) or does not
  list at all: a new stack that made the GPU need any of that is not kept.
* **show** (reported, not gated): the immediate action is to restart the
  application (``RESTART_APP``: 13, 31, 94 ...), nothing
  (``IGNORE``: 43, 63, ...) or the Xid 45 workflow (channels torn down when a
  process is stopped or killed): every stop of the old server during the switch
  may produce them.

Note where the catalog differs from a first reading of the numbers: 63 (a row
marked for remapping) is ``IGNORE`` and 94 (a *contained* ECC error) is
``RESTART_APP``; both are shown, not gated. 62, 64, 95, 109, 119 and 120 are
``RESET_GPU``, 79 ``RESTART_BM``, 48 and 74 workflows: gated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

__all__ = [
    "CATALOG",
    "GATE_ACTIONS",
    "SHOW_ACTIONS",
    "XidEvent",
    "classify",
    "kernel_log_verdict",
    "new_xid_events",
    "parse_xid_line",
    "xid_verdict",
]

_CATALOG_URL = "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

#: Immediate actions after which the new stack is rolled back.
GATE_ACTIONS: frozenset[str] = frozenset(
    {
        "RESET_GPU",
        "RESTART_BM",
        "RESTART_VM",
        "WORKFLOW_XID_48",
        "WORKFLOW_NVLINK_ERR",
        "WORKFLOW_NVLINK5_ERR",
        "CHECK_MECHANICALS",
        "UPDATE_SWFW",
        "UNEXPECTED_ERR_REPORT_ISSUE",
        "FOLLOW_OTHER_XID",
    }
)

#: Immediate actions that an application's own fault or stop calls for: shown only.
SHOW_ACTIONS: frozenset[str] = frozenset({"RESTART_APP", "IGNORE", "WORKFLOW_XID_45", "CHECK_UVM"})


def _catalog() -> dict[int, str]:
    groups = {
        "RESTART_APP": "8 11 13 25 31 32 39 40 41 60 68 69 70 71 72 75 76 77 80 82 83 84 85 86 88 89 "
        "94 96 97 98 99 100 101 102 103 104 105 126 127 128 129 130 131 132 133 134 135 139",
        "IGNORE": "14 37 38 43 44 63 66 67 92 93 106 107 121 137 141 152 153 157 161",
        "WORKFLOW_XID_45": "45",
        "CHECK_UVM": "159",
        "RESET_GPU": "46 62 64 95 109 110 119 120 136 140 143 155 156 158 162",
        "RESTART_BM": "79 160",
        "RESTART_VM": "151",
        "WORKFLOW_XID_48": "48",
        "WORKFLOW_NVLINK_ERR": "74",
        "WORKFLOW_NVLINK5_ERR": "144 145 146 147 148 149 150",
        "CHECK_MECHANICALS": "54",
        "UPDATE_SWFW": "78",
        "FOLLOW_OTHER_XID": "154",  # "Follow guidance as it applies to another Xid"
        "UNEXPECTED_ERR_REPORT_ISSUE": "1 2 3 4 5 6 7 9 10 12 15 16 17 18 19 20 21 22 23 24 26 27 28 29 30 "
        "33 34 35 36 42 47 49 50 51 52 53 55 56 57 58 59 61 65 73 81 87 90 91 108 111 112 113 114 115 116 "
        "117 118 122 123 124 125 138 142",
    }
    return {int(xid): action for action, xids in groups.items() for xid in xids.split()}


#: Xid -> the catalog's immediate action (see the module docstring for the source).
#: Xid 154 (GPU_RECOVERY_ACTION_CHANGED) says another Xid changed the recovery the GPU
#: needs; the gate reads it as that recovery (a reset or reboot) and rolls back.
CATALOG: dict[int, str] = _catalog()

_XID_RE = re.compile(
    r"NVRM: Xid \((?P<device>(?:PCI:)?[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\): "
    r"(?P<xid>\d+), ?(?P<rest>.*)$"
)
_PID_RE = re.compile(r"^pid=(?P<pid>\d+|'<unknown>'),\s*(?:name=(?P<name>[^,]*),\s*)?")


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line.

    Attributes:
        xid: the Xid number (``79``).
        device: the PCI address as printed (``"PCI:0000:2b:00"``).
        pid: the process id the driver named, ``None`` when it printed
            ``'<unknown>'`` or nothing.
        process: the process name (``"python3"``), ``None`` when unknown.
        detail: the text after the Xid number and process (``"GPU has fallen off the bus."``).
        action: the catalog's immediate action (``"RESTART_BM"``), ``"UNLISTED"``
            for a number the catalog does not list.
        gate: True when the event rolls the new stack back (see the module docstring).
        line: the whole log line, as read (trailing newline removed).
    """

    xid: int
    device: str
    pid: int | None
    process: str | None
    detail: str
    action: str
    gate: bool
    line: str

    def to_dict(self) -> dict[str, object]:
        """The event as a plain dict (for Ansible and JSON)."""
        return asdict(self)


def classify(xid: int) -> tuple[str, bool]:
    """``(immediate action, gate)`` for an Xid number by the catalog.

    ``classify(79) == ("RESTART_BM", True)``; ``classify(13) == ("RESTART_APP", False)``;
    a number the catalog does not list gives ``("UNLISTED", True)``: a newer
    driver's fault the gate cannot judge is not kept silently.
    """
    action = CATALOG.get(int(xid))
    if action is None:
        return "UNLISTED", True
    return action, action not in SHOW_ACTIONS


def parse_xid_line(line: str) -> XidEvent | None:
    """Read one kernel log line; ``None`` when it is not an ``NVRM: Xid`` line.

    Any prefix is accepted (``journalctl -k``'s ``May 18 19:02:39 host kernel:``,
    ``dmesg``'s ``[  365.969681]``, syslog's): the match starts at ``NVRM: Xid``.
    """
    if not isinstance(line, str):
        return None
    text = line.rstrip("\r\n")
    match = _XID_RE.search(text)
    if match is None:
        return None
    rest = match.group("rest")
    pid: int | None = None
    process: str | None = None
    who = _PID_RE.match(rest)
    if who:
        pid = int(who.group("pid")) if who.group("pid").isdigit() else None
        name = (who.group("name") or "").strip()
        process = name if name and name != "<unknown>" else None
        rest = rest[who.end() :]
    xid = int(match.group("xid"))
    action, gate = classify(xid)
    return XidEvent(xid, match.group("device"), pid, process, rest.strip(), action, gate, text)


def new_xid_events(lines: Iterable[str] | str, since: str | None = None) -> tuple[list[XidEvent], bool]:
    """The Xid events logged after a marker line.

    Args:
        lines: the kernel log, oldest first: a list of lines or one text.
        since: a line of the same log read before the switch (the last line seen
            then); events after its *last* occurrence are new. ``None``: every
            line is new.

    Returns:
        ``(events, marker_found)``. When ``since`` is given but not in
        ``lines`` (the ring buffer wrapped, the journal was rotated), every
        event is returned and ``marker_found`` is False, so the caller can say
        the window may reach back before the switch.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    rows = [str(line).rstrip("\r\n") for line in lines]
    start, found = 0, since is None
    if since is not None:
        marker = since.rstrip("\r\n")
        for index in range(len(rows) - 1, -1, -1):
            if rows[index] == marker:
                start, found = index + 1, True
                break
    events = [event for event in (parse_xid_line(row) for row in rows[start:]) if event is not None]
    return events, found


def xid_verdict(lines: Iterable[str] | str, since: str | None = None) -> dict[str, object]:
    """Judge the kernel log between the switch and the decision.

    Returns:
        ``{"ok": bool, "gate": [event dicts], "show": [event dicts],
        "marker_found": bool, "message": str}``: ``ok`` is False when any new
        event's catalog action is a GPU reset, a node reboot, a hardware
        workflow or unlisted (the message quotes the first such line and its
        action); ``show`` holds the application-caused ones (13, 31, 43, 45 ...).
        Source of the classes: NVIDIA's Xid catalog (module docstring).
    """
    events, found = new_xid_events(lines, since)
    gate = [e for e in events if e.gate]
    show = [e for e in events if not e.gate]
    if gate:
        first = gate[0]
        numbers = sorted({e.xid for e in gate})
        message = (
            f"the kernel log shows Xid {', '.join(map(str, numbers))} after the switch, which NVIDIA's "
            f"Xid catalog ({_CATALOG_URL}) answers with {first.action} (first: {first.line!r}); "
            "the new stack is rolled back"
        )
    elif show:
        numbers = sorted({e.xid for e in show})
        message = (
            f"the kernel log shows Xid {', '.join(map(str, numbers))} after the switch, caused by an "
            "application or its stop (catalog: RESTART_APP/IGNORE); shown, not gated"
        )
    else:
        message = "no Xid in the kernel log after the switch"
    if not found:
        message += "; the marker line was not found, so the whole log given was read"
    return {
        "ok": not gate,
        "gate": [e.to_dict() for e in gate],
        "show": [e.to_dict() for e in show],
        "marker_found": found,
        "message": message,
    }


def _document(result: object) -> dict[str, object] | None:
    """The host module cuda13_kernel_log's ``log`` record (``{"cursor", "last_line", "error"}``
    from a mark, ``{"lines", "since", "marker_found", "error"}`` from a read), or None."""
    if not isinstance(result, dict):
        return None
    return result if ("error" in result or "lines" in result) else None


def _why(result: object, what: str) -> str:
    if not isinstance(result, dict) or result.get("skipped"):
        return f"the {what} was not taken"
    said = " ".join(str(result.get("stderr") or result.get("msg") or result.get("stdout") or "").split())
    return f"hostscripts/kernel_log.py {what} failed" + (f": {said[:300]}" if said else "")


def kernel_log_verdict(mark: object, read: object) -> dict[str, object]:
    """The kernel log's part of the gate, from ``hostscripts/kernel_log.py``'s two runs.

    Args:
        mark: the ``mark`` run before the switch (cuda13_kernel_log's ``log``; None or
            ``{"skipped": True}`` when it was not taken, a module's failed result when it failed).
        read: the ``read`` run between the switch and the decision (the same forms).

    Returns:
        ``{"read": bool, "xid": [event dicts, oldest first], "gated": bool,
        "marker_found": bool | None, "message": str, "reason": str | None}``:
        ``reason`` (the rollback's, naming each gating Xid, its catalog action and
        the first such line) is set only when ``gated``. A log that could not be
        read gives ``read`` False, ``message`` "kernel log not read: <why>" and
        gates nothing (:func:`xid_verdict` judges what was read).
    """
    marker, lines = _document(mark), _document(read)
    error = None
    if marker is None:
        error = _why(mark, "mark")
    elif marker.get("error"):
        error = str(marker["error"])
    elif lines is None:
        error = _why(read, "read")
    elif lines.get("error"):
        error = str(lines["error"])
    if error is not None:
        return {
            "read": False,
            "xid": [],
            "gated": False,
            "marker_found": None,
            "message": f"kernel log not read: {error}",
            "reason": None,
        }
    assert lines is not None
    rows = [str(line) for line in lines.get("lines") or []]
    since = lines.get("since")
    verdict = xid_verdict(rows, None if since is None else str(since))
    events, _ = new_xid_events(rows, None if since is None else str(since))
    found = verdict["marker_found"] if lines.get("marker_found") is None else bool(lines["marker_found"])
    message = str(verdict["message"])
    if not found and "marker line was not found" not in message:
        message += "; the marker was not found, so the whole log was read"
    return {
        "read": True,
        "xid": [e.to_dict() for e in events],
        "gated": not verdict["ok"],
        "marker_found": found,
        "message": message,
        "reason": message if not verdict["ok"] else None,
    }
