"""Xid lines of the kernel log and the gate's verdict on them.

Every log line below is a real one, quoted byte for byte from the public record
named beside it; hostnames were replaced where a line carried one.
"""

from __future__ import annotations

import pytest

from cuda13_upgrade.xid import CATALOG, classify, new_xid_events, parse_xid_line, xid_verdict

# github.com/NVIDIA/open-gpu-kernel-modules/issues/1151 (RTX 5080, Blackwell, open module
# 595.71.05), journalctl -k without a hostname field:
XID79 = "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
XID79_NEXT = "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus."
# github.com/NVIDIA/open-gpu-kernel-modules/issues/1030 (RTX 5070 Ti, open module 595.71.05), dmesg:
XID31 = (
    "[  365.969681] NVRM: Xid (PCI:0000:01:00): 31, pid=13705, name=UnrealEditor, channel 0x0000000c, "
    "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 faulted @ 0x0_00000000. "
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)
# github.com/vllm-project/vllm/issues/5901 (A800, driver 535), dmesg:
XID13 = (
    "[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
    "ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174"
)
# github.com/NVIDIA/open-gpu-kernel-modules/issues/1150 (driver 590.48.01):
XID45 = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
# github.com/leptonai/gpud/pull/46 (dmesg --ctime, quoted in the PR's README diff):
XID109 = (
    "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, "
    "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
)
XID13_GPUD = (
    "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, "
    "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
# github.com/NVIDIA/NVSentinel/pull/1270 (the syslog health monitor's test log; a process
# name with ':' and '[...]'):
XID119 = (
    "kernel: [16450076.435595] NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], "
    "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) "
    "(0x20802a02 0x8)."
)
# github.com/doitsujin/dxvk/issues/1799 (driver 450.80.02, journalctl -k; an older format
# with pid= and no name=; the hostname "zeus" replaced by "gpu-host"):
XID31_R450 = (
    "Nov 29 11:28:11 gpu-host kernel: NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, intr 00000000. "
    "MMU Fault: ENGINE HOST0 HUBCLIENT_HOST_CPU faulted @ 0x1_0c3c0000. Fault is of type FAULT_PDE "
    "ACCESS_TYPE_VIRT_WRITE"
)
# github.com/doitsujin/dxvk/issues/1027 (driver 418, no pid at all):
XID13_R418 = (
    "[31609.615230] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch"
)
# github.com/NVIDIA/NVSentinel/issues/155 (a module load line, not an Xid):
LOADING = (
    "[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
    "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025"
)


def test_fallen_off_the_bus_is_parsed_and_gated():
    event = parse_xid_line(XID79)
    assert event is not None
    assert (event.xid, event.device, event.pid, event.process) == (79, "PCI:0000:2b:00", None, None)
    assert event.detail == "GPU has fallen off the bus."
    assert (event.action, event.gate) == ("RESTART_BM", True)
    assert event.line == XID79


@pytest.mark.parametrize(
    ("line", "xid", "pid", "process", "detail_start"),
    [
        (XID31, 31, 13705, "UnrealEditor", "channel 0x0000000c"),
        (XID13, 13, None, None, "Graphics Exception: ESR 0x52e7b0"),
        (XID45, 45, 1818990, "python3", "Ch 00000001 caused by previous Xid 149"),
        (XID109, 109, 1797828, "pt_main_thread", "Ch 00000008, errorString CTX SWITCH TIMEOUT"),
        (XID119, 119, 1582259, "nvc:[driver]", "Timeout after 6s of waiting for RPC response"),
        (XID31_R450, 31, 12890, None, "Ch 0000003b, intr 00000000."),
        (XID13_R418, 13, None, None, "Graphics Exception: Class 0x0"),
    ],
)
def test_real_lines_of_every_driver_format(line, xid, pid, process, detail_start):
    event = parse_xid_line(line)
    assert event is not None
    assert (event.xid, event.pid, event.process) == (xid, pid, process)
    assert event.detail.startswith(detail_start)


@pytest.mark.parametrize(
    ("line", "action", "gate"),
    [
        (XID13, "RESTART_APP", False),
        (XID31, "RESTART_APP", False),
        (XID45, "WORKFLOW_XID_45", False),
        (XID109, "RESET_GPU", True),
        (XID119, "RESET_GPU", True),
        (XID79, "RESTART_BM", True),
    ],
)
def test_catalog_classes(line, action, gate):
    event = parse_xid_line(line)
    assert (event.action, event.gate) == (action, gate)


def test_the_catalog_rows_the_issue_names():
    # Gated: GPU reset, node reboot, ECC/NVLink workflows (NVIDIA's Xid catalog, immediate action).
    for xid in (48, 62, 64, 74, 79, 95, 109, 119, 120):
        assert classify(xid)[1] is True, xid
    # Shown: what an application or its stop causes.
    for xid in (13, 31, 43, 45):
        assert classify(xid)[1] is False, xid
    # Where the catalog says otherwise than a first reading: 63 IGNORE, 94 RESTART_APP.
    assert classify(63) == ("IGNORE", False)
    assert classify(94) == ("RESTART_APP", False)
    assert classify(999) == ("UNLISTED", True)
    assert sorted(CATALOG) == list(range(1, 163))


def test_other_lines_are_not_xid_events():
    assert parse_xid_line(XID79_NEXT) is None
    assert parse_xid_line(LOADING) is None
    assert parse_xid_line("") is None


def test_only_lines_after_the_marker_count():
    log = [XID13_GPUD, XID109, LOADING, XID45, XID13]
    events, found = new_xid_events(log, since=LOADING)
    assert found is True
    assert [e.xid for e in events] == [45, 13]
    events, found = new_xid_events("\n".join(log) + "\n", since=None)
    assert found is True and [e.xid for e in events] == [13, 109, 45, 13]


def test_a_missing_marker_reads_everything_and_says_so():
    events, found = new_xid_events([XID109, XID45], since=LOADING)
    assert found is False and [e.xid for e in events] == [109, 45]
    verdict = xid_verdict([XID109, XID45], since=LOADING)
    assert verdict["marker_found"] is False
    assert "marker line was not found" in verdict["message"]


def test_verdict_rolls_back_on_a_critical_xid_with_its_line():
    verdict = xid_verdict([LOADING, XID45, XID13, XID79, XID79_NEXT], since=LOADING)
    assert verdict["ok"] is False
    assert [e["xid"] for e in verdict["gate"]] == [79]
    assert [e["xid"] for e in verdict["show"]] == [45, 13]
    assert "Xid 79" in verdict["message"] and "RESTART_BM" in verdict["message"]
    assert repr(XID79) in verdict["message"]


def test_verdict_shows_application_xids_without_gating():
    verdict = xid_verdict([LOADING, XID45, XID31, XID13], since=LOADING)
    assert verdict["ok"] is True
    assert verdict["gate"] == []
    assert [e["xid"] for e in verdict["show"]] == [45, 31, 13]
    assert "shown, not gated" in verdict["message"]


def test_quiet_log():
    verdict = xid_verdict([LOADING], since=LOADING)
    assert verdict == {
        "ok": True,
        "gate": [],
        "show": [],
        "marker_found": True,
        "message": "no Xid in the kernel log after the switch",
    }
