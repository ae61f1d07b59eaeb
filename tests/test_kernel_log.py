"""The kernel log around the switch: hostscripts/kernel_log.py, run as the host runs it,
the gate's verdict on what it read (cuda13_upgrade.xid.kernel_log_verdict), the result's
``kernel_log`` (cuda13_upgrade.hostresult) and the summary's section (cuda13_upgrade.summary),
and the sandbox's double.

The log lines are the real ones of tests/test_xid.py (each with its source there).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import test_xid
import yaml
from test_xid import LOADING, XID13, XID31, XID45, XID79, XID79_NEXT, XID109

from cuda13_upgrade import hostresult, summary
from cuda13_upgrade.xid import kernel_log_verdict

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "src" / "cuda13_upgrade" / "hostscripts" / "kernel_log.py"
DOUBLE = ROOT / "sandbox" / "host" / "kernel-log"
SIMULATION = ROOT / "sandbox" / "sglang-src" / "python" / "sglang" / "srt" / "simulation.py"


def _run(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _script_result(doc: dict) -> dict:
    """What the steps pass on of the host module cuda13_kernel_log that found ``doc``: its
    ``log`` record itself (cuda13_upgrade.steps.switch, cuda13_upgrade.steps.verify)."""
    return doc


def _dmesg_like(tmp_path: Path) -> tuple[Path, Path]:
    """A command that prints a log file, as dmesg prints the ring buffer."""
    log = tmp_path / "kmsg"
    command = tmp_path / "show-log"
    command.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(log)!r}).read())\n")
    command.chmod(0o755)
    return log, command


def _fake_journalctl(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for ``journalctl -k`` over a file of lines, with journalctl's cursor
    options as journalctl(1) documents them: ``-n 1 --show-cursor`` prints the last entry
    and then "-- cursor: <cursor>"; ``--after-cursor=<cursor>`` prints the entries after
    it and fails (exit status 1) on a cursor it does not know. The cursor here is the
    entry's index, an opaque string as far as the script is concerned."""
    log = tmp_path / "journal"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "journalctl"
    command.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"rows = open({str(log)!r}).read().splitlines()\n"
        "args = sys.argv[1:]\n"
        "after = [a.split('=', 1)[1] for a in args if a.startswith('--after-cursor=')]\n"
        "if '--show-cursor' in args:\n"
        "    for row in rows[-1:]:\n"
        "        print(row)\n"
        "    print(f'-- cursor: i={len(rows) - 1}' if rows else '-- No entries --')\n"
        "elif after:\n"
        "    index = int(after[0].split('=')[1])\n"
        "    if index >= len(rows):\n"
        "        sys.stderr.write('Failed to seek to cursor: Invalid argument\\n')\n"
        "        sys.exit(1)\n"
        "    print('\\n'.join(rows[index + 1:]))\n"
        "else:\n"
        "    print('\\n'.join(rows))\n"
    )
    command.chmod(0o755)
    return log, command


# --- the host script ------------------------------------------------------------


def test_a_plain_command_marks_its_last_line_and_reads_the_driver_lines_after_it(tmp_path):
    log, command = _dmesg_like(tmp_path)
    log.write_text(f"{XID13}\n{LOADING}\n")
    marker = _run("mark", "--command", str(command))
    assert marker == {"cursor": None, "last_line": LOADING, "error": None}
    with log.open("a") as handle:
        handle.write(f"[  400.000000] some other kernel line\n{XID45}\n{XID79}\n{XID79_NEXT}\n")
    read = _run("read", "--command", str(command), "--marker", json.dumps(marker))
    # The driver's lines and the marker; the decision counts from the marker's last occurrence.
    assert read == {
        "lines": [XID13, LOADING, XID45, XID79, XID79_NEXT],
        "since": LOADING,
        "marker_found": None,
        "error": None,
    }
    verdict = kernel_log_verdict(_script_result(marker), _script_result(read))
    assert verdict["read"] is True and verdict["gated"] is True and verdict["marker_found"] is True
    assert [e["xid"] for e in verdict["xid"]] == [45, 79]
    assert verdict["reason"].startswith("the kernel log shows Xid 79 after the switch")
    assert repr(XID79) in verdict["reason"] and "RESTART_BM" in verdict["reason"]


def test_journalctl_is_read_after_the_cursor(tmp_path):
    log, command = _fake_journalctl(tmp_path)
    log.write_text(f"{XID79}\n{LOADING}\n")
    kernel_log = f"{command} -k -o short-iso --no-pager"
    marker = _run("mark", "--command", kernel_log)
    assert marker == {"cursor": "i=1", "last_line": LOADING, "error": None}
    with log.open("a") as handle:
        handle.write(f"{XID31}\n{XID13}\n")
    read = _run("read", "--command", kernel_log, "--marker", json.dumps(marker))
    # The Xid 79 before the cursor is not read again.
    assert read == {"lines": [XID31, XID13], "since": None, "marker_found": True, "error": None}
    verdict = kernel_log_verdict(_script_result(marker), _script_result(read))
    assert verdict["gated"] is False and verdict["reason"] is None
    assert [e["xid"] for e in verdict["xid"]] == [31, 13]
    assert "shown, not gated" in verdict["message"]


def test_a_cursor_the_journal_no_longer_knows_reads_the_whole_log(tmp_path):
    log, command = _fake_journalctl(tmp_path)
    log.write_text(f"{XID109}\n")
    read = _run(
        "read", "--command", str(command), "--marker", json.dumps({"cursor": "i=7", "last_line": "x"})
    )
    assert read == {"lines": [XID109], "since": None, "marker_found": False, "error": None}
    verdict = kernel_log_verdict(_script_result({"cursor": "i=7", "last_line": "x", "error": None}), read)
    assert verdict["gated"] is True and verdict["marker_found"] is False
    assert "the whole log was read" in verdict["message"]


def test_an_empty_journal_has_no_cursor_and_every_later_line_is_new(tmp_path):
    log, command = _fake_journalctl(tmp_path)
    log.write_text("")
    marker = _run("mark", "--command", str(command))
    assert marker == {"cursor": None, "last_line": None, "error": None}
    log.write_text(f"{XID79}\n")
    read = _run("read", "--command", str(command), "--marker", json.dumps(marker))
    assert read["lines"] == [XID79] and read["since"] is None
    assert kernel_log_verdict(marker, read)["gated"] is True


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # journalctl run by a user outside the journal's groups: nothing on stdout, its hint on stderr.
        (
            "sys.stderr.write('No journal files were opened due to insufficient permissions.\\n')",
            "printed nothing: No journal files were opened due to insufficient permissions.",
        ),
        (
            "sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n'); sys.exit(1)",
            "exited with status 1: dmesg: read kernel buffer failed: Operation not permitted",
        ),
    ],
)
def test_a_log_that_cannot_be_read_is_said_and_gates_nothing(tmp_path, body, said):
    command = tmp_path / "log"
    command.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    command.chmod(0o755)
    marker = _run("mark", "--command", str(command))
    assert marker["error"].endswith(said) and marker["last_line"] is None
    verdict = kernel_log_verdict(_script_result(marker), {"skipped": True})
    assert verdict == {
        "read": False,
        "xid": [],
        "gated": False,
        "marker_found": None,
        "message": f"kernel log not read: {marker['error']}",
        "reason": None,
    }


def test_a_missing_command_is_said(tmp_path):
    marker = _run("mark", "--command", str(tmp_path / "no-such-journalctl") + " -k")
    assert marker["error"] == f"{tmp_path / 'no-such-journalctl'}: No such file or directory"
    read = _run("read", "--command", "/nonexistent/dmesg", "--marker", "{}")
    assert read["error"] == "/nonexistent/dmesg: No such file or directory" and read["lines"] == []
    ok_marker = {"cursor": None, "last_line": None, "error": None}
    assert kernel_log_verdict(ok_marker, read)["message"] == (
        "kernel log not read: /nonexistent/dmesg: No such file or directory"
    )


def test_a_mark_that_did_not_run_is_said():
    failed = {"rc": 2, "stdout": "", "stderr": "/usr/bin/python3: can't open file", "changed": False}
    verdict = kernel_log_verdict(failed, {"skipped": True})
    assert verdict["read"] is False and verdict["gated"] is False
    assert verdict["message"] == "kernel log not read: hostscripts/kernel_log.py mark failed: " + (
        "/usr/bin/python3: can't open file"
    )
    assert (
        kernel_log_verdict({"skipped": True}, {})["message"] == "kernel log not read: the mark was not taken"
    )


# --- the result and the summary -----------------------------------------------------


def _facts(mark: dict, read: dict, **more) -> dict:
    return {
        "host": "gpu-node-01",
        "run_id": "r1",
        "status": "rolled_back",
        "measure": True,
        "finished_at": "2026-12-03T10:00:00+00:00",
        "kernel_log_mark": _script_result(mark),
        "kernel_log_read": _script_result(read),
        **more,
    }


MARK = {"cursor": "i=1", "last_line": LOADING, "error": None}


def test_the_result_names_a_gating_xid_in_its_reason_before_the_gate_s_own():
    read = {"lines": [XID45, XID79], "since": None, "marker_found": True, "error": None}
    result = hostresult.host_result(
        _facts(MARK, read, regressed=True, reason="plain: output differs from the old stack")
    )
    log = result["kernel_log"]
    assert log["gated"] is True and [e["xid"] for e in log["xid"]] == [45, 79]
    assert result["reason"].startswith("the kernel log shows Xid 79 after the switch")
    assert result["reason"].endswith("; plain: output differs from the old stack")
    # The throughput gate kept: its keep reasons are not the rollback's.
    kept_figures = hostresult.host_result(_facts(MARK, read, regressed=False, reason="plain: +1.0 %"))
    assert kept_figures["reason"] == log["reason"]
    # A step after the switch failed (the new server never answered): its error follows.
    failed = hostresult.host_result(_facts(MARK, read, status="failed", error="health check timed out"))
    assert failed["reason"].endswith("; health check timed out")


def test_the_result_shows_application_xids_and_keeps_the_gate_s_reason():
    read = {"lines": [XID45, XID13], "since": None, "marker_found": True, "error": None}
    result = hostresult.host_result(_facts(MARK, read, status="kept", reason="plain: +1.0 %"))
    assert result["reason"] == "plain: +1.0 %"
    assert result["kernel_log"]["gated"] is False
    assert [(e["xid"], e["gate"]) for e in result["kernel_log"]["xid"]] == [(45, False), (13, False)]


def test_no_mark_no_kernel_log():
    facts = _facts(MARK, {})
    facts["kernel_log_mark"] = {"skipped": True, "changed": False}
    assert hostresult.host_result(facts)["kernel_log"] is None
    facts["kernel_log_mark"] = {}
    assert hostresult.host_result(facts)["kernel_log"] is None


def test_the_summary_has_a_kernel_log_section(tmp_path):
    gated = hostresult.host_result(
        _facts(MARK, {"lines": [XID79], "since": None, "marker_found": True, "error": None}, host="a")
    )
    unread = hostresult.host_result(
        _facts({"cursor": None, "last_line": None, "error": "journalctl: Permission denied"}, {}, host="b")
    )
    quiet = hostresult.host_result(
        _facts(MARK, {"lines": [], "since": None, "error": None}, host="c", status="kept")
    )
    rows = summary.summary_rows([gated, unread, quiet])
    text = "\n".join(summary._kernel_log_lines(rows))
    assert text == "\n".join(
        [
            "",
            "## Kernel log",
            "",
            f"- a: Xid 79 (RESTART_BM, rolled back): `{XID79}`",
            "- b: kernel log not read: journalctl: Permission denied",
        ]
    )
    assert summary._kernel_log_lines(summary.summary_rows([quiet])) == []


# --- the sandbox's double -------------------------------------------------------------


def _simulation():
    spec = importlib.util.spec_from_file_location("sandbox_simulation", SIMULATION)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses read their module's namespace
    spec.loader.exec_module(module)
    return module


def test_the_simulated_server_logs_only_recorded_driver_lines():
    recorded = {value for name, value in vars(test_xid).items() if name.isupper() and isinstance(value, str)}
    simulation = _simulation()
    for name, (source, line) in simulation.KERNEL_LOG_LINES.items():
        assert line in recorded, name
        assert source.startswith("github.com/"), name
    assert simulation.kernel_log_lines({"kernel_log": {"cu130": ["xid79"]}}, "cu130") == [XID79]
    assert simulation.kernel_log_lines({"kernel_log": {"cu130": ["xid79"]}}, "cu128") == []
    with pytest.raises(ValueError, match="kernel_log.cu130 names 'xid999'"):
        simulation.kernel_log_lines({"kernel_log": {"cu130": ["xid999"]}}, "cu130")


def test_the_molecule_hosts_name_lines_the_simulation_has():
    names = set(_simulation().KERNEL_LOG_LINES)
    for path in sorted((ROOT / "molecule").glob("*/host_vars/*.yml")):
        overrides = (yaml.safe_load(path.read_text()) or {}).get("sandbox_host_scenario_overrides") or {}
        for tag, lines in (overrides.get("kernel_log") or {}).items():
            assert set(lines) <= names, (path, tag)


def test_the_double_prints_the_file_as_dmesg_prints_the_ring_buffer(tmp_path):
    env = {"KERNEL_LOG_DOUBLE_FILE": str(tmp_path / "kmsg"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(DOUBLE)], capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    (tmp_path / "kmsg").write_text(f"{XID79}\n{XID79_NEXT}\n")
    proc = subprocess.run([sys.executable, str(DOUBLE)], capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode, proc.stdout) == (0, f"{XID79}\n{XID79_NEXT}\n")


def test_a_driver_rate_factor_applies_to_the_branch_nvidia_smi_reports():
    simulation = _simulation()
    scenario = {"driver_rate_factor": {"580": 0.9}}
    assert simulation.driver_rate_factor(scenario, "580.142") == 0.9
    assert simulation.driver_rate_factor(scenario, "570.211.01") == 1.0
    assert simulation.driver_rate_factor(scenario, None) == 1.0
    assert simulation.driver_rate_factor({}, "580.142") == 1.0
