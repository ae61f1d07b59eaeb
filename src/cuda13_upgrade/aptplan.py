"""apt on the managed host: the toolkit's transaction, the driver's holds, NVIDIA's sources.

Three questions the toolkit step asks apt before it changes anything:

* **What will the installation do?** ``apt-get -s install PKG=VER`` prints one line per
  action (``Inst``, ``Remv``, ``Purg``, ``Conf``); :func:`parse_simulation` reads them and
  :func:`check_transaction` refuses a transaction that installs, removes or upgrades a driver,
  kernel or dkms package, or that removes or upgrades anything already installed (a new
  install only adds packages; an upgrade or a removal changes what the host runs). A
  metapackage's dependencies can replace the driver (canonical/checkbox#748: "one of the
  dependencies in the cuda chain removes our drivers and force installs the ones from the
  NVIDIA repos"): ``cuda-X-Y`` depends on ``cuda-runtime-X-Y``, which depends on
  ``cuda-drivers``, while ``cuda-toolkit-X-Y`` does not.
* **Which driver packages are installed?** :func:`driver_packages` reads ``dpkg-query`` and
  names the packages to hold, so that NVIDIA's repository cannot move the driver later
  (aws/aws-parallelcluster-cookbook PR #3238: "prevent silent upgrades of the driver through
  the cuda repo").
* **Is NVIDIA's repository already a source?** :func:`parse_sources` reads one-line ``.list``
  and deb822 ``.sources`` files; :func:`repository_sources` finds the entries of one
  repository and whether their ``Signed-By`` values conflict, which makes every apt command
  fail ("E: Conflicting values set for option Signed-By regarding source ... E: The list of
  sources could not be read.", NVIDIA/libnvidia-container#194, NVIDIA/nvidia-docker#1631).

The line formats are apt's own (``apt-get -s`` prints ``Inst NAME [OLD] (NEW ORIGINS [ARCH])``,
``Remv NAME [OLD]``, ``Conf NAME (NEW ORIGINS [ARCH])``); the test fixtures in
``tests/fixtures/apt/`` are real outputs of apt 2.6 on Debian 12.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_INST = re.compile(
    r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])? "
    r"\((?P<new>\S+)(?: (?P<origins>.*?))? \[(?P<arch>[^\]]+)\]\)"
)
_REMV = re.compile(r"^(?P<verb>Remv|Purg) (?P<name>\S+)(?: \[(?P<old>[^\]]*)\])?")
_CONF = re.compile(r"^Conf (?P<name>\S+) \((?P<new>\S+)(?: (?P<origins>.*?))? \[(?P<arch>[^\]]+)\]\)")

# Package names of the NVIDIA driver's user-space and kernel parts, as Debian's
# nvidia-graphics-drivers source and NVIDIA's repositories name them (nvidia-driver,
# nvidia-kernel-dkms, nvidia-kernel-open-dkms, libnvidia-ml1, libcuda1, firmware-nvidia-gsp,
# xserver-xorg-video-nvidia, cuda-drivers-590, nvidia-driver-590 on Ubuntu).
_DRIVER = re.compile(
    r"^(?:lib)?nvidia-|^libcuda1\b|^libnvcuvid|^libnvoptix|^lib\w*-nvidia|^libgl1-nvidia|"
    r"^xserver-xorg-video-nvidia|^firmware-nvidia-|^cuda-drivers|^cuda-compat-"
)
# CUDA toolkit packages whose names start like the driver's but that ship headers, tools or
# documentation (Debian's nvidia-cuda-toolkit and nvidia-cuda-dev, libnvidia-ml-dev).
_NOT_DRIVER = re.compile(r"^nvidia-cuda-|^nvidia-(?:visual-)?profiler$|-dev$|-doc$")
_DKMS = re.compile(r"(?:^|-)dkms$")
_KERNEL = re.compile(
    r"^linux-(?:image|headers|modules|objects|signatures|kbuild|compiler)-|^linux-(?:generic|virtual)"
)


def package_kind(name: str) -> str | None:
    """Whether ``name`` (a Debian binary package, ``:arch`` allowed) belongs to the driver.

    Returns ``"dkms"`` (``dkms`` itself and ``*-dkms`` module packages), ``"kernel"``
    (``linux-image-*``, ``linux-headers-*``, ``linux-modules-*``, ...), ``"driver"`` (the
    NVIDIA driver's packages: ``nvidia-*``, ``libnvidia-*``, ``libcuda1``,
    ``firmware-nvidia-*``, ``cuda-drivers*``, Ubuntu's prebuilt ``linux-modules-nvidia-*``,
    ...; not the toolkit's ``nvidia-cuda-*`` nor
    ``-dev``/``-doc`` packages) or ``None``.
    """
    base = name.split(":", 1)[0]
    if re.match(r"^linux-(?:modules|objects|signatures)-nvidia", base):
        return "driver"
    if _DKMS.search(base):
        return "dkms"
    if _KERNEL.search(base):
        return "kernel"
    if _DRIVER.search(base) and not _NOT_DRIVER.search(base):
        return "driver"
    return None


def parse_simulation(text: str) -> list[dict[str, Any]]:
    """The actions of an ``apt-get -s install|remove|upgrade`` output, in apt's order.

    Each is ``{"action", "package", "version", "old_version", "arch", "origins"}``:
    ``action`` is ``"install"`` (a package new to the host), ``"upgrade"`` (an ``Inst`` line
    with the installed version in brackets: apt prints an upgrade, a downgrade and a
    reinstall this way), ``"remove"`` (``Remv``), ``"purge"`` (``Purg``). ``Conf`` lines
    repeat the ``Inst`` ones and are not returned. Other lines (the summary, warnings)
    are skipped.
    """
    actions: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _INST.match(line)
        if m:
            actions.append(
                {
                    "action": "upgrade" if m["old"] else "install",
                    "package": m["name"],
                    "version": m["new"],
                    "old_version": m["old"],
                    "arch": m["arch"],
                    "origins": (m["origins"] or "").strip(),
                }
            )
            continue
        m = _REMV.match(line)
        if m:
            actions.append(
                {
                    "action": "remove" if m["verb"] == "Remv" else "purge",
                    "package": m["name"],
                    "version": None,
                    "old_version": m["old"] or None,
                    "arch": None,
                    "origins": "",
                }
            )
    return actions


def describe_action(action: Mapping[str, Any]) -> str:
    """One action of :func:`parse_simulation` in words, e.g.
    ``"upgrade nvidia-driver 570.86.15-1 -> 580.95.05-1"``."""
    name = action["package"]
    if action["action"] == "install":
        return f"install {name} {action['version']}"
    if action["action"] == "upgrade":
        return f"upgrade {name} {action['old_version']} -> {action['version']}"
    return f"{action['action']} {name} {action['old_version'] or ''}".rstrip()


def _own_package(name: str) -> bool:
    """The toolkit's own package family (``cuda-*`` that is not the driver: ``cuda-drivers``)."""
    return name.split(":", 1)[0].startswith("cuda-") and package_kind(name) is None


def apt_errors(text: str) -> str:
    """apt's own reasons in an output: its ``E:`` lines and the unmet dependencies block
    (``pkg : Depends: other (= 1.0) but 2.0 is to be installed``), joined by ``"; "``; the
    output's last 400 characters when it has none, ``"(no output)"`` when empty."""
    keep = [
        line.strip()
        for line in text.splitlines()
        if line.startswith(("E:", "W:")) or ": Depends:" in line or line.strip().startswith("Depends:")
    ]
    return "; ".join(keep) or text.strip()[-400:] or "(no output)"


def check_transaction(text: str, requested: list[str]) -> dict[str, Any]:
    """Judge the simulated installation of ``requested`` (``["cuda-toolkit-13-0=13.0.2-1"]``).

    ``text`` is the output of ``apt-get -s install --no-install-recommends <requested>``.
    Returns ``{"ok", "actions", "install", "refused", "reason"}``: ``install`` pins every
    package the transaction installs at the version apt chose (``"name=version"``, apt's
    order), so the real installation installs exactly what was simulated; ``refused`` lists,
    as ``{"package", "action", "kind", "text"}``, every action on a driver, kernel or dkms
    package and every upgrade or removal of an installed package outside the toolkit's own
    ``cuda-*`` family (releases share ``cuda-toolkit-config-common``); ``reason`` says it in one
    sentence with the remedy, or is ``""``.

    Raises ``ValueError`` when ``text`` holds no action for a requested package (apt failed,
    or the output is not a simulation).
    """
    actions = parse_simulation(text)
    names = {a["package"].split(":", 1)[0] for a in actions}
    missing = [r for r in requested if r.split("=", 1)[0] not in names]
    if missing:
        raise ValueError(f"the apt simulation installs none of {', '.join(missing)}: {apt_errors(text)}")
    refused = []
    for a in actions:
        kind = package_kind(a["package"])
        if kind is not None or (
            a["action"] != "install" and not (a["action"] == "upgrade" and _own_package(a["package"]))
        ):
            refused.append(
                {
                    "package": a["package"],
                    "action": a["action"],
                    "kind": kind or "installed package",
                    "text": describe_action(a),
                }
            )
    reason = ""
    if refused:
        reason = (
            f"installing {', '.join(requested)} would also "
            + "; ".join(f"{r['text']} ({r['kind']})" for r in refused)
            + ". The toolkit is installed beside the running stack and must not change the driver,"
            " the kernel, dkms or any installed package: choose a toolkit package and version whose"
            " dependencies the host already satisfies (cuda_toolkit_package: cuda-toolkit-X-Y, not the"
            " cuda, cuda-X-Y, cuda-runtime-X-Y or cuda-drivers metapackages, which depend on the driver),"
            " hold the driver (cuda_toolkit_hold_driver, apt-mark hold), or make that change in a"
            " maintenance window of its own first."
        )
    return {
        "ok": not refused,
        "actions": actions,
        "install": [
            f"{a['package']}={a['version']}" for a in actions if a["action"] in ("install", "upgrade")
        ],
        "refused": refused,
        "reason": reason,
    }


def driver_packages(dpkg_query: str) -> list[dict[str, Any]]:
    """Installed driver, kernel-module and dkms packages to hold.

    ``dpkg_query`` is the output of
    ``dpkg-query -W -f '${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``;
    a package counts when dpkg has it installed (status ``ii``, or ``hi`` when already held).
    The kernel itself is not held (its security updates must flow); the kernel modules'
    packages are (``*-dkms``, ``linux-modules-nvidia-*``). Returns
    ``[{"package", "version", "kind", "held"}]`` sorted by name.
    """
    out = []
    for line in dpkg_query.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, status = parts[0].strip(), parts[1].strip(), parts[2].strip()
        if len(status) < 2 or status[1] != "i":
            continue
        kind = package_kind(name)
        if kind in ("driver", "dkms"):
            out.append({"package": name, "version": version, "kind": kind, "held": status[0] == "h"})
    return sorted(out, key=lambda p: p["package"])


def _options(text: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for item in text.split():
        if "=" in item:
            key, value = item.split("=", 1)
            opts[key.strip().lower()] = value.strip()
    return opts


def parse_sources(path: str, text: str) -> list[dict[str, Any]]:
    """The apt source entries of one file (``sources(5)``).

    A ``.sources`` file is deb822 (stanzas of ``Types:``, ``URIs:``, ``Suites:``,
    ``Components:``, ``Signed-By:``, ``Enabled:``; a multi-line ``Signed-By`` holds an
    inline key); any other file is one-line style (``deb [signed-by=K arch=A] URI SUITE
    [COMPONENT...]``). Returns ``[{"file", "line", "types", "uri", "suite", "components",
    "signed_by", "enabled"}]``, one per (URI, suite); ``signed_by`` is ``""`` when the entry
    names none and ``"(inline key)"`` for an embedded key block.
    """
    entries: list[dict[str, Any]] = []
    if path.endswith(".sources"):
        for start, stanza in _stanzas(text):
            fields: dict[str, str] = {}
            key = None
            for raw in stanza:
                if raw.startswith("#"):
                    continue
                if raw[:1] in (" ", "\t") and key is not None:
                    fields[key] += "\n" + raw.strip()
                    continue
                if ":" in raw:
                    key, value = raw.split(":", 1)
                    key = key.strip().lower()
                    fields[key] = value.strip()
            signed_by = fields.get("signed-by", "")
            if "\n" in signed_by or signed_by.startswith("-----BEGIN"):
                signed_by = "(inline key)"
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    entries.append(
                        {
                            "file": path,
                            "line": start,
                            "types": fields.get("types", "").split(),
                            "uri": uri,
                            "suite": suite,
                            "components": fields.get("components", "").split(),
                            "signed_by": signed_by,
                            "enabled": fields.get("enabled", "yes").lower() not in ("no", "false", "0"),
                        }
                    )
        return entries
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)(.*)$", line)
        if not m:
            continue
        opts = _options(m[2] or "")
        entries.append(
            {
                "file": path,
                "line": number,
                "types": [m[1]],
                "uri": m[3],
                "suite": m[4],
                "components": m[5].split(),
                "signed_by": opts.get("signed-by", ""),
                "enabled": True,
            }
        )
    return entries


def _stanzas(text: str) -> list[tuple[int, list[str]]]:
    stanzas: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 1
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip() == "":
            if current:
                stanzas.append((start, current))
            current = []
            continue
        if not current:
            start = number
        current.append(raw.rstrip())
    if current:
        stanzas.append((start, current))
    return stanzas


def _same_repository(uri: str, repo_url: str) -> bool:
    def norm(u: str) -> str:
        return re.sub(r"^[a-z+]+://", "", u.strip()).rstrip("/")

    return norm(uri) == norm(repo_url)


def repository_sources(
    entries: list[dict[str, Any]], repo_url: str, keyring: str, own_file: str
) -> dict[str, Any]:
    """Decide how the toolkit step uses NVIDIA's repository ``repo_url`` (a flat repository).

    ``entries`` are every enabled source entry of the host (:func:`parse_sources` over
    ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*``); the same repository is the
    same URI up to its scheme and final slash. ``own_file`` is the file the role would write,
    ``keyring`` the ``Signed-By`` it would name.

    Returns ``{"action", "entries", "signed_by", "reason"}``: ``"add"`` when no file names the
    repository (the role writes ``own_file``); ``"reuse"`` when the existing entries agree on
    one ``Signed-By`` (nothing is written; ``signed_by`` is theirs); ``"conflict"`` when they
    name different ``Signed-By`` values: apt then refuses every command ("E: Conflicting values
    set for option Signed-By regarding source <uri> <suite>: <a> != <b>"), and ``reason`` names
    both files and the remedy.
    """
    found = [e for e in entries if e.get("enabled", True) and _same_repository(e["uri"], repo_url)]
    if not found:
        return {"action": "add", "entries": [], "signed_by": keyring, "reason": ""}
    keys = sorted({e["signed_by"] for e in found})
    if len(keys) == 1:
        return {"action": "reuse", "entries": found, "signed_by": keys[0], "reason": ""}
    shown = "; ".join(f"{e['file']}:{e['line']} signed-by={e['signed_by'] or '(none)'}" for e in found)
    first = found[0]
    return {
        "action": "conflict",
        "entries": found,
        "signed_by": "",
        "reason": (
            f"NVIDIA's repository {repo_url} is a source more than once with different Signed-By"
            f" keyrings ({shown}), so apt refuses every command (E: Conflicting values set for option"
            " Signed-By regarding source"
            f" {first['uri']} {first['suite']}: {' != '.join(keys)};"
            " E: The list of sources could not be read.)."
            f" Keep one of these entries (remove the other file, or make both name the same keyring; the role"
            f" writes {own_file} with signed-by={keyring} only where no entry exists) and run again."
        ),
    }
