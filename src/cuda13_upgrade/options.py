"""Every option of the upgrade checked once, before any host changes.

:func:`validate` is the one place where the inventory's and the command line's
values are checked and converted. It takes the options' argument specs (the
roles' ``meta/argument_specs.yml``, merged) and the values the inventory or
``-e`` gave, and:

1. checks and converts the types with Ansible's own argument spec validator
   (``ansible.module_utils.common.arg_spec.ArgumentSpecValidator``), so that
   the string forms ``-e key=value`` gives (``"0.005"``, ``"true"``, ``"7"``)
   become the float, bool or int the spec names; ansible-core's role argument
   validation checks types but leaves the variables as they were, so the
   converted values are returned here for the later steps to use;
2. applies the rules a spec cannot express (:data:`RULES`): ranges, formats
   (a toolkit release is ``MAJOR.MINOR`` of a release NVIDIA ships, a systemd
   unit name, a URL, an absolute path), unique profile names, server
   arguments as lists of strings;
3. compares the values with each other (:func:`_cross_checks`): the toolkit
   release against the pinned package version, the new venv and SGLang tree
   against the serving ones, trial counts, speculative pairs against the
   profiles.

Each failure names the option, the value and what is expected, in the
package's message format (:func:`cuda13_upgrade.errors.format_message`).
The rules that need the host (the unit exists, the old venv exists, the apt
repository offers the pinned version, the indexes answer) are checked by the
preflight's tasks with read-only commands and :func:`host_failures`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from cuda13_upgrade import driver
from cuda13_upgrade.errors import format_message
from cuda13_upgrade.redact import redact
from cuda13_upgrade.versions import (
    DRIVER_TABLE,
    driver_supports,
    min_compute_capability,
    parse_compute_capability,
    parse_driver_version,
    parse_toolkit_version,
)

__all__ = ["PLAY_OPTIONS", "RULES", "host_failures", "packages_versions", "shipped_releases", "validate"]

#: Options read by the playbooks themselves (play keywords and switches), not by
#: a role: specs in the argument spec format, checked like the roles' options.
PLAY_OPTIONS: dict[str, dict[str, Any]] = {
    "cuda13_serial": {"type": "raw"},
    "cuda13_max_parallel": {"type": "raw"},
    "cuda13_window": {"type": "raw"},
    "cuda13_until": {"type": "raw"},
    "cuda13_max_failed_hosts": {"type": "raw"},
    "cuda13_breaker_rollbacks": {"type": "raw"},
    "cuda13_breaker_days": {"type": "raw"},
    "cuda13_breaker_ack": {"type": "raw"},
    "cuda13_block_on_alerts": {"type": "raw"},
    "cuda13_notify": {"type": "raw"},
    "cuda13_max_fail_percentage": {"type": "int"},
    "cuda13_preflight_allow_partial": {"type": "bool"},
    "cuda13_break_lock": {"type": "bool"},
    "cuda13_target_hosts": {"type": "str"},
    "cuda13_driver_only": {"type": "bool"},
}

_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
_DROPIN_RE = re.compile(r"^[A-Za-z0-9_.@-]+\.conf$")
_PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)$")
_PACKAGE_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)-(\d+)$")
# Debian Policy 5.6.1: lower case letters, digits, + - . ; two characters or more, starting
# with a letter or digit.
_PACKAGE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_PYTHON_VERSION_RE = re.compile(r"^3\.\d{1,2}$")
_SERIAL_RE = re.compile(r"^(?:[1-9]\d*|(?:[1-9]\d?|100)%)$")


def shipped_releases() -> list[str]:
    """``MAJOR.MINOR`` of every CUDA 13 release NVIDIA ships, from the driver table.

    Source: :data:`cuda13_upgrade.versions.DRIVER_TABLE` (CUDA Toolkit Release
    Notes, Table 3).
    """
    return sorted({f"{major}.{minor}" for major, minor, _ in DRIVER_TABLE if major == 13})


# --- rules per option: each returns None (fine) or (problem, expected) -------------


def _min(low: float) -> Callable[[Any], tuple[str, str] | None]:
    def rule(value: Any) -> tuple[str, str] | None:
        if isinstance(value, bool):
            return "is not a number", f"a number >= {low:g}"
        if value is not None and value < low:
            return "is out of range", f"a number >= {low:g}"
        return None

    rule.__doc__ = f"a number >= {low:g}"
    return rule


def _between(low: float, high: float, *, high_open: bool = False) -> Callable[[Any], tuple[str, str] | None]:
    def rule(value: Any) -> tuple[str, str] | None:
        if value is None:
            return None
        upper = f"< {high:g}" if high_open else f"<= {high:g}"
        if isinstance(value, bool):
            return "is not a number", f"a number >= {low:g} and {upper}"
        if value < low or value > high or (high_open and value == high):
            return "is out of range", f"a number >= {low:g} and {upper}"
        return None

    rule.__doc__ = f"a number >= {low:g} and {'<' if high_open else '<='} {high:g}"
    return rule


def _positive(value: Any) -> tuple[str, str] | None:
    """a number > 0"""
    if isinstance(value, bool):
        return "is not a number", "a number > 0"
    if value is not None and value <= 0:
        return "is out of range", "a number > 0"
    return None


def _release(value: Any) -> tuple[str, str] | None:
    """MAJOR.MINOR of a CUDA 13 release NVIDIA ships (driver table)"""
    shipped = ", ".join(shipped_releases())
    if not isinstance(value, str) or not _RELEASE_RE.match(value.strip()):
        return "is not a CUDA toolkit release", f"MAJOR.MINOR of a release NVIDIA ships ({shipped}), quoted"
    if value.strip() not in shipped_releases():
        return "is not a CUDA 13 release NVIDIA ships", f"one of {shipped}"
    return None


def _package_version(value: Any) -> tuple[str, str] | None:
    """MAJOR.MINOR.UPDATE-BUILD apt version"""
    if not isinstance(value, str) or not _PACKAGE_VERSION_RE.match(value.strip()):
        return (
            "is not an apt version of cuda-toolkit-<major>-<minor>",
            "MAJOR.MINOR.UPDATE-BUILD as NVIDIA's repository lists it, e.g. '13.0.2-1'",
        )
    return None


#: Characters a path or URL option may not hold: whitespace and the shell's metacharacters
#: that separate, substitute, redirect or quote (POSIX Shell Command Language 2.2 and 2.4).
#: A value reaches host commands as one argument; refusing these keeps one that was ever
#: put into a command line from becoming more than one, or a command of its own.
_SHELL_CHARACTERS = frozenset(";$`|&<>'\"\\")


def _shell_character(text: str) -> str | None:
    """The first character of ``text`` that is whitespace, unprintable or in
    :data:`_SHELL_CHARACTERS`, else None."""
    return next((c for c in text if c in _SHELL_CHARACTERS or c.isspace() or not c.isprintable()), None)


def _refused_character(text: str, what: str) -> tuple[str, str] | None:
    """``(problem, expected)`` when ``text`` holds a character :func:`_shell_character` finds."""
    found = _shell_character(text)
    if found is None:
        return None
    hint = " (percent-encode it, e.g. %20 for a space)" if what == "URL" else ""
    return (
        f"holds {found!r}, which a {what} given to the upgrade may not hold (whitespace or a shell "
        "metacharacter)",
        f"a {what} without whitespace, control characters or any of ; $ ` | & < > ' \" \\{hint}",
    )


def _url(*, empty_ok: bool = False, schemes: tuple[str, ...] = ("http", "https")) -> Callable[[Any], Any]:
    def rule(value: Any) -> tuple[str, str] | None:
        if empty_ok and value == "":
            return None
        refused = _refused_character(str(value), "URL")
        if refused:
            return refused
        parts = urlsplit(str(value))
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "file"):
            expected = " or ".join(f"{s}://" for s in schemes)
            return "is not a URL", f"an absolute {expected} URL" + (" or ''" if empty_ok else "")
        return None

    rule.__doc__ = "a " + "/".join(schemes) + " URL" + (" or ''" if empty_ok else "")
    return rule


def _urls(value: Any) -> tuple[str, str] | None:
    """a list of http(s)/file URLs"""
    for url in value or []:
        refused = _refused_character(str(url), "URL")
        if refused:
            return f"holds {url!r}, which {refused[0]}", f"a list of URLs, each {refused[1]}"
        if _url(schemes=("http", "https", "file"))(url):
            return f"holds {url!r}, which is not a URL", "a list of http(s):// or file:// index URLs"
    return None


def _abs_path(*, empty_ok: bool = False) -> Callable[[Any], tuple[str, str] | None]:
    def rule(value: Any) -> tuple[str, str] | None:
        if empty_ok and value in ("", None):
            return None
        text = str(value)
        refused = _refused_character(text, "path")
        if refused:
            return refused
        if not text.startswith("/") or posixpath.normpath(text) == "/":
            return "is not an absolute path", "an absolute path on the host other than /" + (
                " (or '')" if empty_ok else ""
            )
        return None

    rule.__doc__ = "an absolute path other than /" + (" or ''" if empty_ok else "")
    return rule


def _abs_paths(value: Any) -> tuple[str, str] | None:
    """a list of absolute paths"""
    for path in value or []:
        refused = _refused_character(str(path), "path")
        if refused:
            return f"holds {path!r}, which {refused[0]}", f"a list of absolute paths, each {refused[1]}"
        if _abs_path()(path):
            return f"holds {path!r}, which is not an absolute path", "a list of absolute paths"
    return None


def _unit(value: Any) -> tuple[str, str] | None:
    """a systemd service unit name (NAME.service)"""
    if not isinstance(value, str) or not _UNIT_RE.match(value):
        return "is not a systemd service unit name", "a unit name with its suffix, e.g. 'sglang.service'"
    return None


_CLIENT_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(?:service|scope)$")


def _units(value: Any) -> tuple[str, str] | None:
    """a list of systemd unit names (NAME.service, or NAME.scope for a container)"""
    if not isinstance(value, list):
        return "is not a list", "a list of unit names, e.g. ['nvidia-dcgm.service']"
    for unit in value:
        if not isinstance(unit, str) or not _CLIENT_UNIT_RE.match(unit):
            return (
                f"holds {unit!r}, which is not a systemd unit name",
                "unit names with their suffix (.service, or .scope for a container)",
            )
    return None


_APT_REQUEST_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9]+)?(?:=[A-Za-z0-9.+~:-]+)?$")


def _apt_requests(value: Any) -> tuple[str, str] | None:
    """a list of apt requests, each NAME or NAME=VERSION (Debian Policy 5.6.1 and 5.6.12)"""
    if not isinstance(value, list):
        return "is not a list", "a list of apt requests, e.g. ['nvidia-driver-580-open']"
    for request in value:
        if not isinstance(request, str) or not _APT_REQUEST_RE.match(request):
            return (
                f"holds {request!r}, which is not an apt request",
                "package names, each alone or as NAME=VERSION (e.g. 'nvidia-driver-580-open')",
            )
    return None


def _driver_target(value: Any) -> tuple[str, str] | None:
    """'' (no driver window), a driver version ('580.95.05') or a branch ('R580')"""
    if isinstance(value, float):
        return (
            "is a YAML number",
            "the version quoted (YAML reads 580.10 as 580.1), e.g. '580.95.05', or a branch such as 'R580'",
        )
    try:
        driver.parse_target(value, option=None)
    except ValueError:
        return (
            "is not an NVIDIA driver version or branch",
            "a driver version such as '580.95.05', a branch such as 'R580', or '' for no driver window",
        )
    return None


def _dropin(value: Any) -> tuple[str, str] | None:
    """a drop-in file name (NAME.conf, no directory)"""
    if not isinstance(value, str) or not _DROPIN_RE.match(value):
        return "is not a drop-in file name", "a file name ending in .conf, without a directory"
    return None


def _package_name(value: Any) -> tuple[str, str] | None:
    """a Debian package name (Policy 5.6.1), e.g. cuda-toolkit-13-0"""
    if not isinstance(value, str) or not _PACKAGE_NAME_RE.match(value):
        return (
            "is not a Debian package name",
            "lower case letters, digits, '+', '-' and '.' (e.g. 'cuda-toolkit-13-0')",
        )
    return None


def _nonempty(value: Any) -> tuple[str, str] | None:
    """non-empty"""
    if not value or (isinstance(value, str) and not value.strip()):
        return "is empty", "a non-empty value"
    return None


def _profiles(value: Any) -> tuple[str, str] | None:
    """non-empty list of {name: unique word, server_args, new_stack_args: string lists,
    soak_concurrency: int >= 1 (optional)}, no more"""
    expected = (
        "a non-empty list of {name: unique name, server_args: list of strings, "
        "new_stack_args: list of strings added on the new stack only, "
        "soak_concurrency: soak requests at once (optional, >= 1)}"
    )
    if not value:
        return "is empty", expected
    names = []
    for profile in value:
        name = profile.get("name")
        if not isinstance(name, str) or not _PROFILE_NAME_RE.match(name):
            return f"has a profile whose name {name!r} is not a word", expected + " (letters, digits, _ . -)"
        for key in ("server_args", "new_stack_args"):
            args = profile.get(key, [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                return f"has profile {name!r} whose {key} {args!r} is not a list of strings", expected
        at_once = profile.get("soak_concurrency", 1)
        if isinstance(at_once, bool) or not isinstance(at_once, int) or at_once < 1:
            return f"has profile {name!r} whose soak_concurrency {at_once!r} is not an int >= 1", expected
        unknown = sorted(set(profile) - {"name", "server_args", "new_stack_args", "soak_concurrency"})
        if unknown:
            return f"has profile {name!r} with unknown keys {unknown}", expected
        names.append(name)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return f"names profiles {duplicates} more than once", expected
    return None


def _requirements(value: Any) -> tuple[str, str] | None:
    """PEP 508 requirements (packaging)"""
    for line in value or []:
        try:
            Requirement(line)
        except InvalidRequirement:
            return (
                f"holds {line!r}, which is not a requirement",
                "PEP 508 requirements such as 'torch==2.10.0+cu130'",
            )
    return None


def _driver_version(value: Any) -> tuple[str, str] | None:
    """'' or an NVIDIA driver version"""
    if value in ("", None):
        return None
    try:
        parse_driver_version(str(value), option=None)
    except ValueError:
        return "is not an NVIDIA driver version", "'' or a driver version such as '580.95.05'"
    return None


def _capabilities(value: Any) -> tuple[str, str] | None:
    """list of compute capabilities MAJOR.MINOR ([]: the platform's default list)"""
    for cc in value or []:
        try:
            parse_compute_capability(str(cc), option=None)
        except ValueError:
            return f"holds {cc!r}, which is not a compute capability", "MAJOR.MINOR strings such as '12.0'"
    return None


def _toolkit_version(value: Any) -> tuple[str, str] | None:
    """MAJOR.MINOR or MAJOR.MINOR.UPDATE of a CUDA toolkit (versions.parse_toolkit_version)"""
    try:
        parse_toolkit_version(value, option=None)
    except ValueError:
        return (
            "is not a CUDA toolkit release",
            "MAJOR.MINOR or MAJOR.MINOR.UPDATE as a quoted string, e.g. '13.0' or '13.0.2'",
        )
    return None


def _python_version(value: Any) -> tuple[str, str] | None:
    """'3.MINOR'"""
    if not isinstance(value, str) or not _PYTHON_VERSION_RE.match(value):
        return "is not a Python version", "'3.MINOR', e.g. '3.10'"
    return None


def _version(value: Any) -> tuple[str, str] | None:
    """a PEP 440 version (packaging)"""
    try:
        Version(str(value))
    except InvalidVersion:
        return "is not a version", "a version such as '3.10'"
    return None


def _sglang_method(value: Any) -> tuple[str, str] | None:
    """source (build the git ref) or wheel (the release's wheel)"""
    from cuda13_upgrade.sglang_build import METHODS

    if value not in METHODS:
        return "is not an install method", " or ".join(METHODS)
    return None


def _serial(value: Any) -> tuple[str, str] | None:
    """batch sizes: int >= 1 or 'N%' (1-100), or a list of them"""
    expected = "a batch size (an int >= 1 or a percentage such as '25%') or a list of them"
    batches = value if isinstance(value, list) else [value]
    if not batches or not all(_SERIAL_RE.match(str(b).strip()) for b in batches):
        return "is not a batch size", expected
    return None


def _max_parallel(value: Any) -> tuple[str, str] | None:
    """the ramp's cap: an int >= 1 or 'N%' (1-100) of the fleet (cuda13_upgrade.batches)"""
    from cuda13_upgrade.batches import ramp

    try:
        ramp(4, value)
    except ValueError:
        return "is not a batch size", "a host count (an int >= 1) or a percentage of the fleet such as '25%'"
    return None


def _max_failed_hosts(value: Any) -> tuple[str, str] | None:
    """the failure budget: an int >= 0 or 'N%' (0-100) of the fleet, rounded down (cuda13_upgrade.budget)"""
    from cuda13_upgrade.budget import allowed

    try:
        allowed(value, 4)
    except ValueError:
        return "is not a failure budget", "a host count (an int >= 0) or a percentage of the fleet ('10%')"
    return None


def _breaker_rollbacks(value: Any) -> tuple[str, str] | None:
    """the breaker's threshold: an int >= 0, 0 turns it off (cuda13_upgrade.breaker)"""
    from cuda13_upgrade.breaker import threshold_of

    try:
        threshold_of(value)
    except ValueError:
        return "is not a count of rollbacks", "an int >= 0 (0 turns the breaker off)"
    return None


def _breaker_days(value: Any) -> tuple[str, str] | None:
    """the breaker's period: an int >= 1 of days (cuda13_upgrade.breaker)"""
    from cuda13_upgrade.breaker import days_of

    try:
        days_of(value)
    except ValueError:
        return "is not a number of days", "an int >= 1"
    return None


def _breaker_ack(value: Any) -> tuple[str, str] | None:
    """'' or a run id, as --run-id takes it (cuda13_upgrade.breaker)"""
    from cuda13_upgrade.breaker import ack_of

    try:
        ack_of(value)
    except ValueError:
        return "is not a run id", "the run id the breaker's refusal names, e.g. 20261202T020000Z"
    return None


def _window(value: Any) -> tuple[str, str] | None:
    """{} or {start: 'HH:MM', end: 'HH:MM', timezone: IANA name, days: [mon, ...]} (cuda13_upgrade.window)"""
    from cuda13_upgrade.errors import Cuda13Error
    from cuda13_upgrade.window import parse_window

    try:
        parse_window(value)
    except Cuda13Error as exc:
        reason = exc.problem.removeprefix("cuda13_window ")
        return (
            f"is not a maintenance window ({reason})",
            '{start: "HH:MM", end: "HH:MM", timezone: "Europe/Berlin", days: [mon, ...]}, times quoted, '
            "or {} for no window",
        )
    return None


def _block_on_alerts(value: Any) -> tuple[str, str] | None:
    """{} or {url: Prometheus URL, match, ignore, firing_only, interval_s, timeout_s, max_wait_s,
    on_unreachable} (cuda13_upgrade.alerts)"""
    from cuda13_upgrade.alerts import OPTION, parse
    from cuda13_upgrade.errors import Cuda13Error

    try:
        parse(value)
    except Cuda13Error as exc:
        reason = exc.problem.removeprefix(f"{OPTION} ")
        # Every remedy of cuda13_upgrade.alerts begins with "give", which _failure puts back.
        return f"is not an alert gate ({reason})", (exc.remedy or "").removeprefix("give ")
    return None


def _notify(value: Any) -> tuple[str, str] | None:
    """{} or {targets: [{url: webhook URL, format: slack or json}], timeout_s: 5} (cuda13_upgrade.notify)"""
    from cuda13_upgrade.errors import Cuda13Error
    from cuda13_upgrade.notify import OPTION, parse

    try:
        parse(value)
    except Cuda13Error as exc:
        reason = exc.problem.removeprefix(f"{OPTION} ")
        return f"is not a notification setting ({reason})", (exc.remedy or "").removeprefix("give ")
    return None


def _until(value: Any) -> tuple[str, str] | None:
    """'' or HH:MM (the next such time) or an ISO 8601 date and time (cuda13_upgrade.window)"""
    from datetime import UTC, datetime

    from cuda13_upgrade.window import parse_until

    if value in ("", None):
        return None
    try:
        parse_until(value, datetime(1970, 1, 1, tzinfo=UTC))
    except ValueError:
        return (
            "is not a time",
            "HH:MM (quoted), or an ISO 8601 date and time such as '2026-12-01T06:00+01:00'",
        )
    return None


def _space_places(value: Any) -> tuple[str, str] | None:
    """a mapping of places (pip_tmpdir, new_venv, ...) to absolute paths or ''"""
    from cuda13_upgrade.space import PLACES

    if not isinstance(value, Mapping):
        return "is not a mapping", f"a mapping of {sorted(PLACES)} to paths"
    unknown = sorted(set(value) - set(PLACES))
    if unknown:
        return f"names unknown places {unknown}", f"only {sorted(PLACES)}"
    for place, path in value.items():
        if not path or (isinstance(path, str) and "{{" in path):  # not written; a template resolves later
            continue
        if not (isinstance(path, str) and (path.startswith("/") or path.startswith("~"))):
            return f"has a path for {place} that is not absolute", "absolute paths (or ~/...), or ''"
    return None


def _hook(value: Any) -> tuple[str, str] | None:
    """'' or a task file (.yml/.yaml)"""
    if value in ("", None):
        return None
    if not str(value).endswith((".yml", ".yaml")):
        return "is not a task file", "'' or the path of a task file (.yml) on the control node"
    return None


def _speculative_pairs(value: Any) -> tuple[str, str] | None:
    """a list of {speculative: profile, plain: profile}"""
    for pair in value or []:
        if not isinstance(pair.get("speculative"), str) or not isinstance(pair.get("plain"), str):
            return f"holds {pair!r}", "a list of {speculative: profile name, plain: profile name}"
    return None


#: Rules beyond the argument specs, per option. Source: what each step does with
#: the value (roles/*/tasks); the numbers' ranges are those of the gate
#: (cuda13_upgrade.throughput) and of the commands that take them.
RULES: dict[str, Callable[[Any], tuple[str, str] | None]] = {
    # cuda13
    "cuda13_toolkit_release": _release,
    "cuda13_toolkit_package_version": _package_version,
    "cuda13_wheels_index_url": _url(schemes=("http", "https", "file")),
    "cuda13_wheels_extra_index_urls": _urls,
    "cuda13_old_venv": _abs_path(),
    "cuda13_old_sglang_src": _abs_path(),
    "cuda13_new_venv": _abs_path(),
    "cuda13_new_sglang_src": _abs_path(),
    "cuda13_service_name": _unit,
    "cuda13_server_url": _url(),
    "cuda13_health_timeout": _between(1, 86400),
    "cuda13_driver_reboot_timeout": _between(60, 86400),
    "cuda13_driver_boot_time_command": _nonempty,
    "cuda13_leftover_timeout": _between(0, 3600),
    "cuda13_kernel_log_command": _nonempty,
    "cuda13_lock_lease_hours": _positive,
    "cuda13_profiles": _profiles,
    "cuda13_baseline_max_age_hours": _min(0),
    "cuda13_cache_root": _abs_path(),
    "cuda13_pip_tmpdir": _abs_path(),
    "cuda13_new_stack_name": _nonempty,
    "cuda13_switch_dropin": _dropin,
    "cuda13_profile_dropin": _dropin,
    "cuda13_driver_target": _driver_target,
    "cuda13_driver_gpu_clients": _units,
    "cuda13_driver_packages": _apt_requests,
    "cuda13_drain_tasks": _hook,
    "cuda13_undrain_tasks": _hook,
    "cuda13_router_url": _url(empty_ok=True),
    "cuda13_router_worker_url": _url(),
    "cuda13_drain_wait_seconds": _between(0, 86400),
    "cuda13_soak_seconds": _between(0, 86400),
    "cuda13_soak_interval_seconds": _between(1, 3600),
    "cuda13_state_dir": _abs_path(),
    "cuda13_run_id": _nonempty,
    # play
    "cuda13_serial": _serial,
    "cuda13_max_parallel": _max_parallel,
    "cuda13_window": _window,
    "cuda13_until": _until,
    "cuda13_max_failed_hosts": _max_failed_hosts,
    "cuda13_breaker_rollbacks": _breaker_rollbacks,
    "cuda13_breaker_days": _breaker_days,
    "cuda13_breaker_ack": _breaker_ack,
    "cuda13_block_on_alerts": _block_on_alerts,
    "cuda13_notify": _notify,
    "cuda13_max_fail_percentage": _between(0, 100),
    "cuda13_target_hosts": _nonempty,
    # stack_snapshot
    "stack_snapshot_venv": _abs_path(),
    "stack_snapshot_sglang_src": _abs_path(),
    "stack_snapshot_service_name": _unit,
    "stack_snapshot_cache_dirs": _abs_paths,
    "stack_snapshot_dir": _abs_path(),
    # cuda_toolkit
    "cuda_toolkit_release": _release,
    "cuda_toolkit_package_version": _package_version,
    "cuda_toolkit_package": _package_name,
    "cuda_toolkit_apt_repo_url": _url(schemes=("http", "https", "file")),
    "cuda_toolkit_apt_keyring": _abs_path(),
    "cuda_toolkit_keyring_package_url": _url(schemes=("http", "https", "file")),
    "cuda_toolkit_apt_source_file": _nonempty,
    "cuda_toolkit_apt_record": _abs_path(),
    # cu130_wheels
    "cu130_wheels_venv": _abs_path(),
    "cu130_wheels_python": _abs_path(),
    "cu130_wheels_index_url": _url(schemes=("http", "https", "file")),
    "cu130_wheels_extra_index_urls": _urls,
    "cu130_wheels_requirements": _requirements,
    "cu130_wheels_lock_file": _abs_path(empty_ok=True),
    "cu130_wheels_pip_tmpdir": _abs_path(),
    "cu130_wheels_expected_cuda_major": _min(1),
    # sglang_build
    "sglang_build_method": _sglang_method,
    "sglang_build_repo": _nonempty,
    "sglang_build_version": _nonempty,
    "sglang_build_src": _abs_path(),
    "sglang_build_venv": _abs_path(),
    "sglang_build_pip_tmpdir": _abs_path(),
    "sglang_build_cuda_home": _abs_path(),
    "sglang_build_index_url": _url(schemes=("http", "https", "file")),
    "sglang_build_extra_index_urls": _urls,
    "sglang_build_build_requirements": _requirements,
    "sglang_build_record": _abs_path(),
    # stack_switch
    "stack_switch_old_venv": _abs_path(),
    "stack_switch_new_venv": _abs_path(),
    "stack_switch_cuda_home": _abs_path(),
    "stack_switch_service_name": _unit,
    "stack_switch_dropin_name": _dropin,
    "stack_switch_profile_dropin": _dropin,
    "stack_switch_server_url": _url(),
    "stack_switch_health_timeout": _between(1, 86400),
    "stack_switch_cache_root": _abs_path(),
    "stack_switch_stack_name": _nonempty,
    # verify_throughput
    "verify_throughput_profiles": _profiles,
    "verify_throughput_venv": _abs_path(),
    "verify_throughput_output_len": _min(1),
    "verify_throughput_prompt_len": _min(1),
    "verify_throughput_bench_prompts": _min(1),
    "verify_throughput_warmup": _min(0),
    "verify_throughput_min_trials": _min(3),
    "verify_throughput_max_trials": _min(3),
    "verify_throughput_tolerance_pct": _between(0, 100, high_open=True),
    "verify_throughput_z": _positive,
    "verify_throughput_ttft_prompt_len": _min(0),
    "verify_throughput_ttft_requests": _min(1),
    "verify_throughput_ttft_tolerance_pct": _between(0, 100, high_open=True),
    "verify_throughput_concurrency": _min(0),
    "verify_throughput_concurrency_tolerance_pct": _between(0, 100, high_open=True),
    "verify_throughput_soak_requests": _min(0),
    "verify_throughput_soak_concurrency": _min(1),
    "verify_throughput_soak_deadline_s": _min(1),
    "verify_throughput_probe_prompts": _min(1),
    "verify_throughput_probe_tokens": _min(1),
    "verify_throughput_probe_min_prefix_tokens": _min(1),
    "verify_throughput_probe_min_agreeing_share": _between(0, 1),
    "verify_throughput_accept_length_drop_pct": _between(0, 100, high_open=True),
    "verify_throughput_require_speculative_gain": _speculative_pairs,
    "verify_throughput_service_name": _unit,
    "verify_throughput_server_url": _url(),
    "verify_throughput_health_timeout": _between(1, 86400),
    "verify_throughput_profile_dropin": _dropin,
    "verify_throughput_dir": _abs_path(),
    # rollback
    "rollback_snapshot_file": _abs_path(),
    "rollback_service_name": _unit,
    "rollback_server_url": _url(),
    "rollback_health_timeout": _between(1, 86400),
    "rollback_clear_dirs": _abs_paths,
    "rollback_new_venv": _abs_path(),
    "rollback_new_sglang_src": _abs_path(),
    "rollback_apt_record": _abs_path(),
    "rollback_sglang_build_record": _abs_path(),
    "rollback_profile_dropin": _dropin,
    # artifact_cache
    "artifact_cache_index_url": _url(schemes=("http", "https", "file")),
    "artifact_cache_extra_index_urls": _urls,
    "artifact_cache_requirements": _requirements,
    "artifact_cache_python_version": _python_version,
    "artifact_cache_implementation": _nonempty,
    # nvidia_driver_check
    "nvidia_driver_check_toolkit_release": _toolkit_version,
    "nvidia_driver_check_min_driver_version": _driver_version,
    "nvidia_driver_check_allowed_compute_capabilities": _capabilities,
    "nvidia_driver_check_expected_gpu_count": _min(1),
    "nvidia_driver_check_nvidia_smi": _nonempty,
    "nvidia_driver_check_nvidia_smi_timeout": _between(1, 3600),
    "nvidia_driver_check_required_disk_gib": _min(0),
    "nvidia_driver_check_disk_path": _abs_path(),
    "nvidia_driver_check_space_places": _space_places,
    "nvidia_driver_check_python": _abs_path(),
    "nvidia_driver_check_min_python_version": _version,
}

#: Options whose rule looks at the value as given, before Ansible's conversion
#: (which turns server_args "--a b" into ["--a b"] and 3 into "3").
_RAW_RULES = ("cuda13_profiles", "verify_throughput_profiles")

#: Options whose value must be given as a string: YAML reads an unquoted 3.10 as the
#: number 3.1, which the spec's str type would turn into the string "3.1".
_QUOTED = ("nvidia_driver_check_toolkit_release", "nvidia_driver_check_min_python_version")

_ALIAS_RE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def _failure(option: str, value: Any, problem: str, expected: str) -> dict[str, Any]:
    # A URL's user:password@ masked (cuda13_block_on_alerts, index URLs); cuda13_notify's webhook
    # URLs as a whole (redact.SECRET_URL_KEYS).
    value = redact({option: value})[option]
    return {
        "option": option,
        "value": value,
        "message": format_message(f"{option} {problem}", value, option=option, remedy=f"give {expected}"),
    }


def _type_failures(values: Mapping[str, Any], specs: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """Types and choices by Ansible's validator; returns (converted values, failures)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    converted: dict[str, Any] = {}
    failures: list[dict[str, Any]] = []
    for option, value in values.items():
        spec = {k: v for k, v in specs[option].items() if k not in ("default", "description", "required")}
        if spec.get("type") == "int" and isinstance(value, str) and re.match(r"^\s*-?\d+\.0*\s*$", value):
            value = value.strip().split(".")[0]  # "7.0" from a calculation: the int it names
        result = ArgumentSpecValidator({option: spec}).validate({option: value})
        if result.error_messages:
            messages = "; ".join(result.error_messages)
            expected = spec.get("type", "str")
            if spec.get("elements"):
                expected = f"{expected} of {spec['elements']}"
            if spec.get("choices"):
                expected = f"one of {spec['choices']}"
            failures.append(
                {
                    "option": option,
                    "value": value,
                    "message": format_message(
                        f"{option} is not valid ({messages})", value, option=option, remedy=f"give {expected}"
                    ),
                }
            )
        else:
            converted[option] = result.validated_parameters[option]
    return converted, failures


def _effective(converted: Mapping[str, Any], specs: Mapping[str, Any]) -> dict[str, Any]:
    """Values as the steps will see them: given, else a literal default, else an alias's value."""
    effective = dict(converted)
    pending = {}
    for option, spec in specs.items():
        if option in effective or "default" not in spec:
            continue
        default = spec["default"]
        alias = _ALIAS_RE.match(default) if isinstance(default, str) else None
        if alias:
            pending[option] = alias.group(1)
        elif not (isinstance(default, str) and "{{" in default) and not (
            isinstance(default, list) and any("{{" in str(d) for d in default)
        ):
            effective[option] = default
    for _ in range(3):  # aliases of aliases (stack_switch_health_timeout -> cuda13_health_timeout)
        for option, target in list(pending.items()):
            if target in effective:
                effective[option] = effective[target]
                del pending[option]
    return effective


def _inside(path: str, other: str) -> bool:
    path, other = posixpath.normpath(path), posixpath.normpath(other)
    return path == other or path.startswith(other.rstrip("/") + "/")


def _cross_checks(values: Mapping[str, Any], given: Mapping[str, Any]) -> list[dict[str, Any]]:
    failures = []

    def blame(*options: str) -> str:
        """The option the user gave (the one to change), else the first."""
        return next((o for o in options if o in given), options[0])

    release = values.get("cuda13_toolkit_release")
    package_version = values.get("cuda13_toolkit_package_version")
    if isinstance(release, str) and isinstance(package_version, str):
        match = _PACKAGE_VERSION_RE.match(package_version.strip())
        if _RELEASE_RE.match(release.strip()) and match:
            upstream = f"{match.group(1)}.{match.group(2)}"
            if upstream != release.strip():
                option = blame("cuda13_toolkit_release", "cuda13_toolkit_package_version")
                failures.append(
                    _failure(
                        option,
                        values[option],
                        f"disagrees with the other: cuda13_toolkit_release {release!r} installs "
                        f"cuda-toolkit-{release.strip().replace('.', '-')}, but "
                        f"cuda13_toolkit_package_version {package_version!r} is a {upstream} version",
                        "a release and a package version of the same MAJOR.MINOR "
                        f"(e.g. '{upstream}' with '{package_version}')",
                    )
                )
    for role_option, shared in (
        ("cuda_toolkit_release", "cuda13_toolkit_release"),
        ("cuda_toolkit_package_version", "cuda13_toolkit_package_version"),
    ):
        if role_option in given and shared in values and values[role_option] != values[shared]:
            failures.append(
                _failure(
                    role_option,
                    values[role_option],
                    f"differs from {shared} {values[shared]!r}, which the preflight and the other steps use",
                    f"the value through {shared} only",
                )
            )

    pairs = (
        ("cuda13_new_venv", "cuda13_old_venv", "the serving venv"),
        ("cuda13_new_sglang_src", "cuda13_old_sglang_src", "the serving SGLang tree"),
        ("cuda13_new_venv", "cuda13_old_sglang_src", "the serving SGLang tree"),
        ("cuda13_new_sglang_src", "cuda13_old_venv", "the serving venv"),
        ("cu130_wheels_venv", "cuda13_old_venv", "the serving venv"),
        ("sglang_build_venv", "cuda13_old_venv", "the serving venv"),
        ("sglang_build_src", "cuda13_old_sglang_src", "the serving SGLang tree"),
        ("stack_switch_new_venv", "cuda13_old_venv", "the serving venv"),
    )
    for new, old, what in pairs:
        if not new.startswith("cuda13_") and new not in given:
            continue  # its default is the cuda13_ option, checked itself
        new_path, old_path = values.get(new), values.get(old)
        if isinstance(new_path, str) and isinstance(old_path, str) and new_path and old_path:
            if _inside(new_path, old_path) or _inside(old_path, new_path):
                option = old if old in given and new not in given else new
                failures.append(
                    _failure(
                        option,
                        values[option],
                        f"makes the new path {new}={new_path!r} and {what} {old}={old_path!r} "
                        "the same or one inside the other; the serving one must stay untouched",
                        "a separate path beside it, e.g. '/opt/ml-env-cu130' or '/opt/sglang-cu130'",
                    )
                )
    new_venv, new_src = values.get("cuda13_new_venv"), values.get("cuda13_new_sglang_src")
    if (
        isinstance(new_venv, str)
        and isinstance(new_src, str)
        and (_inside(new_src, new_venv) or _inside(new_venv, new_src))
    ):
        option = blame("cuda13_new_sglang_src", "cuda13_new_venv")
        failures.append(
            _failure(
                option,
                values[option],
                "overlaps the other of cuda13_new_venv / cuda13_new_sglang_src",
                "two separate paths",
            )
        )

    # The wheel method installs sglang==<the release the ref names>: a commit or branch names none.
    from cuda13_upgrade.sglang_build import release_version

    method, ref = values.get("sglang_build_method"), values.get("sglang_build_version")
    if method == "wheel" and isinstance(ref, str) and ref.strip() and release_version(ref) is None:
        option = blame("sglang_build_version", "sglang_build_method")
        problem = (
            "names no release (vX.Y.Z), so sglang_build_method 'wheel' has no wheel to install"
            if option == "sglang_build_version"
            else f"is 'wheel', but sglang_build_version {ref!r} names no release (vX.Y.Z) to install"
        )
        failures.append(
            _failure(
                option,
                values[option],
                problem,
                "a release tag such as 'v0.5.9' for the wheel, or sglang_build_method 'source' for a commit",
            )
        )

    low, high = values.get("verify_throughput_min_trials"), values.get("verify_throughput_max_trials")
    if isinstance(low, int) and isinstance(high, int) and high < low:
        option = blame("verify_throughput_max_trials", "verify_throughput_min_trials")
        failures.append(
            _failure(
                option,
                values[option],
                f"leaves verify_throughput_max_trials ({high}) below verify_throughput_min_trials ({low})",
                "verify_throughput_max_trials >= verify_throughput_min_trials",
            )
        )

    switch, profile = values.get("cuda13_switch_dropin"), values.get("cuda13_profile_dropin")
    if switch and switch == profile:
        option = blame("cuda13_profile_dropin", "cuda13_switch_dropin")
        failures.append(
            _failure(
                option,
                values[option],
                "names the same drop-in as the other of the switch/profile drop-ins",
                "two different file names",
            )
        )

    release_major = (
        release.strip().split(".")[0]
        if isinstance(release, str) and _RELEASE_RE.match(release.strip())
        else None
    )
    cuda_major = values.get("cu130_wheels_expected_cuda_major")
    if release_major and isinstance(cuda_major, int) and str(cuda_major) != release_major:
        failures.append(
            _failure(
                "cu130_wheels_expected_cuda_major",
                cuda_major,
                f"differs from the major of cuda13_toolkit_release {release!r}",
                f"{release_major}",
            )
        )

    profiles = values.get("cuda13_profiles")
    names = (
        {p.get("name") for p in profiles}
        if isinstance(profiles, list) and all(isinstance(p, Mapping) for p in profiles)
        else None
    )
    for pair in values.get("verify_throughput_require_speculative_gain") or []:
        if names is not None and isinstance(pair, Mapping):
            missing = [pair.get(k) for k in ("speculative", "plain") if pair.get(k) not in names]
            if missing:
                failures.append(
                    _failure(
                        "verify_throughput_require_speculative_gain",
                        pair,
                        f"names profiles {missing} that cuda13_profiles lacks",
                        f"names of cuda13_profiles ({sorted(names)})",
                    )
                )
    # No allowed list lifts the release's compute capability floor (CUDA 13: 7.5).
    allowed = values.get("nvidia_driver_check_allowed_compute_capabilities")
    target = values.get("nvidia_driver_check_toolkit_release") or release
    try:
        floor = min_compute_capability(target, option=None)
        floor_cc = parse_compute_capability(floor, option=None) if floor else None
        below = [cc for cc in allowed or [] if parse_compute_capability(str(cc), option=None) < floor_cc]
    except (TypeError, ValueError):  # no floor, or a malformed release or list: its own rule says so
        below = []
    if below:
        failures.append(
            _failure(
                "nvidia_driver_check_allowed_compute_capabilities",
                allowed,
                f"holds {below}, below {floor}, the oldest compute capability CUDA {target} supports "
                "(CUDA 13 removed Maxwell, Pascal and Volta)",
                f"a list without {below}; hosts with such GPUs stay on CUDA 12",
            )
        )
    failures.extend(_driver_target_failures(values))
    if values.get("cuda13_driver_only") and not str(values.get("cuda13_driver_target") or "").strip():
        failures.append(
            _failure(
                "cuda13_driver_target",
                values.get("cuda13_driver_target"),
                "is empty, and cuda13_driver_only (cuda13-upgrade driver, playbooks/driver.yml) moves each"
                " host's driver to it",
                "the driver to move to, e.g. -e cuda13_driver_target=580.95.05 or R580 (docs/driver.md)",
            )
        )
    failures.extend(pip_environment_failures(values))
    return failures


def _driver_target_failures(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``cuda13_driver_target`` below the driver floor of the run's CUDA release (CUDA Toolkit
    Release Notes, Table 3: 13.0 needs 580.65.06): the move would leave the host refused."""
    try:
        target = driver.parse_target(values.get("cuda13_driver_target"), option=None)
        release = values.get("nvidia_driver_check_toolkit_release") or values.get("cuda13_toolkit_release")
        floor = driver_supports(
            "0.0.0",
            str(release),
            min_driver_version=values.get("nvidia_driver_check_min_driver_version") or None,
        ).required
    except (TypeError, ValueError):  # off, or a malformed value: its own rule says so
        return []
    if target is None:
        return []
    try:
        driver.check_target(target, floor=floor, option=None)
    except ValueError:
        return [
            _failure(
                "cuda13_driver_target",
                values.get("cuda13_driver_target"),
                f"is below {floor}, the driver floor of CUDA {release}",
                f"a target at or above {floor}, e.g. 'R{floor.split('.', 1)[0]}' or '{floor}'",
            )
        ]
    return []


#: The pip environments whose pip runs with ``--isolated`` (steps/wheels.py, steps/resolve.py,
#: steps/sglang.py): pip reads none of its ``PIP_*`` variables there (pip's ``--isolated``:
#: "ignoring environment variables and user configuration").
_ISOLATED_PIP_ENVIRONMENTS = ("cu130_wheels_pip_environment", "sglang_build_environment")


def pip_environment_failures(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The variables of the pip environments that pip ignores.

    ``cu130_wheels_pip_environment`` and ``sglang_build_environment``: any ``PIP_*`` name
    (every pip call there runs with ``--isolated``). ``artifact_cache_pip_environment``
    (``pip download`` on the control node, not isolated): ``PIP_INDEX_URL``, which its
    ``--index-url`` overrides. Each failure names the variable only: the values may be
    secrets and are never shown. Returns ``[{"option", "value": [names], "message"}]``.
    """
    failures = []
    for option in (*_ISOLATED_PIP_ENVIRONMENTS, "artifact_cache_pip_environment"):
        environment = values.get(option)
        if not isinstance(environment, Mapping):
            continue
        isolated = option in _ISOLATED_PIP_ENVIRONMENTS
        for name in sorted(str(k) for k in environment):
            if not (name.startswith("PIP_") if isolated else name == "PIP_INDEX_URL"):
                continue
            why = (
                "every pip call of the upgrade runs with --isolated, which makes pip read none of its "
                "PIP_* variables (the index options are given on its command line)"
                if isolated
                else "pip download's --index-url (artifact_cache_index_url) wins over it"
            )
            failures.append(
                {
                    "option": option,
                    "value": [name],
                    "message": (
                        f"{option} sets {name}, which pip ignores: {why}. Option: {option}. Fix: remove "
                        f"{name}; for an index that wants credentials put them in a netrc file on the "
                        f"{'host' if isolated else 'control node'} (docs/credentials.md)."
                    ),
                }
            )
    return failures


#: Options whose values hold secrets: ``cuda13_notify``'s webhook URLs, the ``user:password@``
#: of ``cuda13_block_on_alerts``'s Prometheus URL.
_SECRET_OPTIONS = ("cuda13_notify", "cuda13_block_on_alerts")


def _masked(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the secrets of :data:`_SECRET_OPTIONS` masked: the record every step reads
    (the fact ``cuda13_options``, which ``-v`` and AWX print) needs none of them; the gates that
    send or ask read the option from the inventory (:mod:`cuda13_upgrade.steps.fleet`,
    action ``cuda13_fleet``)."""
    for option in _SECRET_OPTIONS:
        if values.get(option):
            values[option] = redact({option: values[option]})[option]
    return values


def validate(
    values: Mapping[str, Any],
    specs: Mapping[str, Mapping[str, Any]],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check and convert every option the upgrade's steps read.

    Args:
        values: ``{option: value}`` as the inventory or ``-e`` gave them (only
            the options that were given; strings from ``-e key=value`` too).
        specs: ``{option: argument spec entry}`` of every role (their
            ``meta/argument_specs.yml`` options, merged); :data:`PLAY_OPTIONS`
            are added. Values of options without a spec are ignored.
        defaults: ``{option: value}`` of the options not given, as the roles'
            ``defaults/main.yml`` give them once templated (Ansible's own
            templating, by the action plugin cuda13_options); None to take the
            specs' literal defaults and aliases (``{{ other_option }}``) only.

    Returns:
        ``{"ok": bool, "failures": [{"option", "value", "message"}, ...],
        "values": {option: converted value}}``; ``values`` holds the given
        options converted to their spec's type (``"0.005"`` -> ``0.005`` for a
        float) and the defaults of the others, for later steps to use.

    Raises:
        Nothing for bad values (each is a failure); ``TypeError`` when
        ``values`` or ``specs`` is not a mapping.
    """
    if not isinstance(values, Mapping) or not isinstance(specs, Mapping):
        raise TypeError("validate() takes two mappings: the given values and the specs")
    all_specs = {**PLAY_OPTIONS, **specs}
    given = {k: v for k, v in values.items() if k in all_specs}
    converted, failures = _type_failures(given, all_specs)
    for option, value in converted.items():
        rule = RULES.get(option)
        if option in _RAW_RULES and isinstance(given[option], list):
            value = given[option]  # Ansible's list type splits a string; the rule sees what was given
        problem = rule(value) if rule else None
        if option in _QUOTED and given[option] is not None and not isinstance(given[option], str):
            problem = (
                f"is a {type(given[option]).__name__}, not a quoted string",
                "the value quoted, e.g. '3.10' (YAML reads an unquoted 3.10 as the number 3.1)",
            )
        if problem:
            failures.append(_failure(option, given[option], *problem))
    if failures:
        return {"ok": False, "failures": failures, "values": _masked(converted)}
    if defaults is None:
        effective = _effective(converted, all_specs)
    else:
        # A default that templates to a string is converted as a given value is: an alias of a
        # given option (stack_switch_health_timeout: "{{ cuda13_health_timeout }}") templates to
        # what was given, the string "120" of -e cuda13_health_timeout=120, not the converted 120.
        templated = {k: v for k, v in defaults.items() if k in all_specs and k not in converted}
        typed, default_failures = _type_failures(
            {k: v for k, v in templated.items() if isinstance(v, str)}, all_specs
        )
        effective = {**templated, **typed, **converted}
        if default_failures:  # a default templated to a value of the wrong type
            return {"ok": False, "failures": default_failures, "values": _masked(effective)}
    for option, value in effective.items():
        if option in converted:
            continue
        rule = RULES.get(option)
        problem = rule(value) if rule else None
        if problem:  # a default made wrong by another option (e.g. an alias)
            failures.append(_failure(option, value, *problem))
    failures.extend(_cross_checks(effective, converted))
    return {"ok": not failures, "failures": failures, "values": _masked(effective)}


def packages_versions(text: str, package: str) -> list[str]:
    """Versions of ``package`` in an apt ``Packages`` index (deb822 stanzas).

    Source: Debian Policy 5.1 and the repository format (``Package:`` and
    ``Version:`` fields of each stanza, stanzas separated by blank lines).
    """
    versions = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(
            (m.group(1).lower(), m.group(2).strip())
            for m in re.finditer(r"^([A-Za-z0-9-]+):[ \t]*(.*)$", stanza, re.MULTILINE)
        )
        if fields.get("package") == package and "version" in fields:
            versions.append(fields["version"])
    return versions


def host_failures(facts: Mapping[str, Any], values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The host-dependent rules, from read-only observations of the host.

    Args:
        facts: ``{"unit_load_state": "loaded" | "not-found" | ...,
            "unit_exec_start": "<ExecStart=... line of systemctl show>",
            "old_python_exists": bool, "apt_packages": the text of the
            repository's ``Packages`` index, or None when it did not answer,
            "apt_error": str, "indexes": {url: HTTP status or error text}}``.
        values: validated options (:func:`validate`'s ``values``).

    Returns:
        A list of failures like :func:`validate`'s.
    """
    failures = []
    if "unit_show" in facts:  # the text of systemctl show --property=LoadState --property=ExecStart
        shown = dict(line.partition("=")[::2] for line in str(facts["unit_show"]).splitlines() if "=" in line)
        facts = {
            **facts,
            "unit_load_state": shown.get("LoadState")
            or ("not-found" if int(facts.get("unit_rc", 0)) else None),
        }
        exec_start = shown.get("ExecStart", "")
        new_venv = str(facts.get("new_venv") or "").rstrip("/")
        facts["unit_exec_start"] = None if new_venv and f"{new_venv}/bin/python" in exec_start else exec_start
    service = values.get("cuda13_service_name", "sglang.service")
    old_venv = str(values.get("cuda13_old_venv", "/opt/ml-env")).rstrip("/")
    if facts.get("unit_load_state") not in (None, "loaded"):
        failures.append(
            _failure(
                "cuda13_service_name",
                service,
                f"is not a unit on the host (systemd: LoadState={facts.get('unit_load_state')})",
                "the name of the systemd unit that runs the SGLang server (systemctl list-units)",
            )
        )
    elif facts.get("unit_exec_start") is not None and f"{old_venv}/bin/python" not in str(
        facts["unit_exec_start"]
    ):
        failures.append(
            _failure(
                "cuda13_old_venv",
                old_venv,
                f"is not the venv whose Python the unit {service} runs ({facts['unit_exec_start']!r})",
                "the venv of the unit's ExecStart (<venv>/bin/python -m sglang.launch_server)",
            )
        )
    if facts.get("old_python_exists") is False:
        failures.append(
            _failure(
                "cuda13_old_venv",
                old_venv,
                "has no bin/python on the host",
                "the path of the serving virtual environment",
            )
        )
    # The toolkit step's package: cuda_toolkit_package when given, else its default
    # (roles/cuda_toolkit/defaults/main.yml).
    package = values.get("cuda_toolkit_package") or (
        "cuda-toolkit-" + str(values.get("cuda13_toolkit_release", "")).replace(".", "-")
    )
    version = values.get("cuda13_toolkit_package_version")
    packages = facts.get("apt_packages")
    apt_versions = None if packages is None else packages_versions(str(packages), package)
    repo = values.get("cuda_toolkit_apt_repo_url", "")
    if apt_versions is None and facts.get("apt_error"):
        failures.append(
            _failure(
                "cuda_toolkit_apt_repo_url",
                repo,
                f"does not answer ({facts['apt_error']})",
                "the URL of NVIDIA's repository (or a mirror) that the host can read",
            )
        )
    elif apt_versions == [] and values.get("cuda_toolkit_package"):
        failures.append(
            _failure(
                "cuda_toolkit_package",
                package,
                f"is not a package of {repo} (its Packages index has no stanza of it)",
                "a metapackage the repository offers, e.g. "
                + "cuda-toolkit-"
                + str(values.get("cuda13_toolkit_release", "")).replace(".", "-"),
            )
        )
    elif apt_versions is not None and version not in apt_versions:
        offered = ", ".join(apt_versions) if apt_versions else "none"
        failures.append(
            _failure(
                "cuda13_toolkit_package_version",
                version,
                f"is not offered by {repo} for {package} (it offers: {offered})",
                "a version the repository lists for the package",
            )
        )
    for url, status in (facts.get("indexes") or {}).items():
        if str(status).split(" ")[0] != "200":
            failures.append(
                _failure(
                    "cuda13_wheels_index_url"
                    if url == values.get("cuda13_wheels_index_url")
                    else "cuda13_wheels_extra_index_urls",
                    url,
                    f"does not answer ({status})",
                    "the URL of a PEP 503 index the host can read",
                )
            )
    return failures


#: The rules that compare values (:func:`_cross_checks`) and those against the host
#: (:func:`host_failures`), per option, as docs/options.md states them
#: (:mod:`cuda13_upgrade.options_doc`).
RELATIONS: dict[str, str] = {
    "cuda13_toolkit_release": "same MAJOR.MINOR as cuda13_toolkit_package_version",
    "cuda13_toolkit_package_version": "offered by cuda_toolkit_apt_repo_url's Packages index (host)",
    "cuda_toolkit_release": "equal to cuda13_toolkit_release",
    "cuda_toolkit_package_version": "equal to cuda13_toolkit_package_version",
    "cuda_toolkit_package": "offered at cuda13_toolkit_package_version by cuda_toolkit_apt_repo_url (host)",
    "cuda_toolkit_apt_repo_url": "answers from the host (its Packages index)",
    "cuda13_old_venv": "has bin/python on the host; the unit runs its Python (or, switched, the new venv's)",
    "cuda13_new_venv": "not cuda13_old_venv / cuda13_old_sglang_src, nor inside them or they inside it",
    "cuda13_new_sglang_src": "not cuda13_old_sglang_src / cuda13_old_venv / cuda13_new_venv, nor inside",
    "cu130_wheels_venv": "not cuda13_old_venv nor inside it",
    "sglang_build_venv": "not cuda13_old_venv nor inside it",
    "sglang_build_src": "not cuda13_old_sglang_src nor inside it",
    "sglang_build_method": "wheel: sglang_build_version names a release (vX.Y.Z)",
    "sglang_build_version": "a release (vX.Y.Z), not a commit, with sglang_build_method wheel",
    "stack_switch_new_venv": "not cuda13_old_venv nor inside it",
    "cuda13_service_name": "a unit the host's systemd knows (LoadState=loaded)",
    "cuda13_wheels_index_url": "answers HTTP 200 from the host (unless cuda13_artifact_cache)",
    "cuda13_wheels_extra_index_urls": "each answers HTTP 200 from the host (unless cuda13_artifact_cache)",
    "verify_throughput_max_trials": ">= verify_throughput_min_trials",
    "cuda13_profile_dropin": "differs from cuda13_switch_dropin",
    "cu130_wheels_expected_cuda_major": "the major of cuda13_toolkit_release",
    "verify_throughput_require_speculative_gain": "names profiles of cuda13_profiles",
    "cuda13_serial": "one value for every host of the rollout (playbooks/start.yml)",
    "cuda13_max_parallel": "one value for every host; not used with cuda13_serial",
    "cuda13_window": "one value for every host of the rollout",
    "cuda13_until": "one value for every host; after the run's start",
    "cuda13_max_failed_hosts": "one value for every host of the rollout",
    "cuda13_breaker_rollbacks": "one value for every host of the rollout",
    "cuda13_breaker_days": "one value for every host of the rollout",
    "cuda13_breaker_ack": "one value for every host of the rollout",
    "cuda13_block_on_alerts": "one value for every host of the rollout",
    "cuda13_notify": "one value for every host of the rollout",
}
