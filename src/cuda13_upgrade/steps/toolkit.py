"""The step ``toolkit``: the CUDA toolkit beside the running one, through apt (action ``cuda13_toolkit``).

Three functions, one per state of the action:

* :func:`plan` (``state: planned``), read-only, what apt will do: whether the pinned toolkit
  package is installed already (a re-run gets no apt transaction, so nothing can move its
  links), how NVIDIA's repository is a source (``aptplan.repository_sources``: add the role's
  own file, reuse the host's entry, or refuse entries that disagree on ``Signed-By``), and
  apt's transaction, simulated in a scratch apt state (``aptplan.check_transaction``: refused
  when it would touch the driver, the kernel, dkms or an installed package). The preflight
  runs it on every host before any host changes (:func:`cuda13_upgrade.steps.preflight.check`).
* :func:`install` (``state: present``), the step: hold the driver's packages (dpkg's hold,
  ``aptplan.driver_packages``), pin the CUDA alternatives groups in manual mode on their current
  target, add NVIDIA's repository when the host has no entry for it, record what changed in apt
  on the host (``cuda_toolkit_apt_record``), install exactly the simulated transaction, check
  that the pins held and that the new nvcc reports the release.
* :func:`revert` (``state: reverted``), the rollback's apt part: undo exactly what the record
  says the step changed - release the holds it added, remove the source file it wrote, read
  apt's sources again (``apt-get update``), remove the record.

The host's side is ``hostscripts/aptstate.py`` (modules ``cuda13_apt_read``,
``cuda13_apt_simulate``), read-only; every change goes through Ansible's own modules
(``ansible.builtin.dpkg_selections``, ``.command`` for ``update-alternatives --set``,
``.apt``, ``.apt_repository``, ``.file``) and the record through ``cuda13_record``, so that
in check mode they report what they would change and change nothing. The rules and the
reasons for them are in ``roles/cuda_toolkit/README.md``.

Options read (the ``cuda13_options`` record, or the role's variables): ``cuda_toolkit_release``,
``cuda_toolkit_package``, ``cuda_toolkit_package_version``, ``cuda_toolkit_apt_repo_url``,
``cuda_toolkit_apt_keyring``, ``cuda_toolkit_install_keyring_package``,
``cuda_toolkit_keyring_package_url``, ``cuda_toolkit_apt_source_file``,
``cuda_toolkit_pin_alternatives``, ``cuda_toolkit_hold_driver``, ``cuda_toolkit_apt_record``;
``rollback_apt_record`` for :func:`revert`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cuda13_upgrade import aptplan, stack
from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.nvcc import parse_nvcc_version
from cuda13_upgrade.steps.host import Host, StepFailed, json_text

#: The keys of :func:`plan`'s record.
PLAN_KEYS = (
    "package",
    "version",
    "toolkit_dir",
    "own_source",
    "installed",
    "to_install",
    "source",
    "transaction",
)

#: Where the host's apt sources are read from (tests point the step at another directory).
APT_DIR = "/etc/apt"


def _option(options: Mapping[str, Any], name: str) -> Any:
    value = options.get(name)
    if value is None or value == "":
        raise StepFailed(
            f"The option {name} has no value: the toolkit step needs it"
            " (roles/cuda_toolkit/defaults/main.yml). Nothing on the host was changed."
        )
    return value


def _flag(options: Mapping[str, Any], name: str, default: bool) -> bool:
    """A boolean option as Ansible reads one (``true``, ``"yes"``, ``"1"``, ``"on"``...)."""
    value = options.get(name, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def names(options: Mapping[str, Any], apt_dir: str = APT_DIR) -> dict[str, str]:
    """The toolkit's names from the options: ``{"package", "version", "release", "request"
    (``package=version``), "toolkit_dir" (``/usr/local/cuda-<release>``), "own_source" (the
    sources.list.d file the step writes,
    ``/etc/apt/sources.list.d/<cuda_toolkit_apt_source_file>.list``, under ``apt_dir``)}``."""
    release = str(_option(options, "cuda_toolkit_release"))
    package = str(_option(options, "cuda_toolkit_package"))
    version = str(_option(options, "cuda_toolkit_package_version"))
    return {
        "package": package,
        "version": version,
        "release": release,
        "request": f"{package}={version}",
        "toolkit_dir": f"/usr/local/cuda-{release}",
        "own_source": f"{apt_dir}/sources.list.d/{_option(options, 'cuda_toolkit_apt_source_file')}.list",
    }


def judge_transaction(text: str, requested: list[str]) -> dict[str, Any]:
    """``aptplan.check_transaction`` of a simulation's text; a simulation that installs none of
    ``requested`` (apt failed) is ``{"ok": False, ..., "reason": apt's errors}``, not raised."""
    try:
        return aptplan.check_transaction(text, requested)
    except ValueError as exc:
        return {"ok": False, "actions": [], "install": [], "refused": [], "reason": str(exc)}


def plan(host: Host, options: Mapping[str, Any], *, apt_dir: str = APT_DIR) -> dict[str, Any]:
    """What the toolkit step will do with apt, read-only (runs the same in check mode).

    Returns ``{"package", "version", "toolkit_dir", "own_source", "installed" ("VERSION STATUS"
    as dpkg has the package, or None), "to_install" (not installed at the pinned version: ``ii``),
    "source" (``aptplan.repository_sources``: ``{"action": "add"|"reuse", "entries",
    "signed_by", "reason"}``), "transaction" (``aptplan.check_transaction``: ``{"ok",
    "actions", "install", "refused", "reason"}``; None when nothing is to install)}``.

    Raises StepFailed, with the record so far, when NVIDIA's repository is a source more than
    once with different ``Signed-By`` keyrings, or when apt's simulated transaction would
    touch the driver, the kernel, dkms or an installed package (or apt could not simulate it).
    ``apt_dir``: where the host's sources are read.
    """
    n = names(options, apt_dir)
    repo_url = str(_option(options, "cuda_toolkit_apt_repo_url"))
    keyring = str(_option(options, "cuda_toolkit_apt_keyring"))
    found = host.module(
        "cuda13_apt_read", {"package": n["package"], "sources": True, "apt_dir": apt_dir}, check_mode=False
    )
    installed = found.get("installed")
    record: dict[str, Any] = {
        "package": n["package"],
        "version": n["version"],
        "toolkit_dir": n["toolkit_dir"],
        "own_source": n["own_source"],
        "installed": installed,
        # A host that has the pinned package already (a re-run) gets no apt transaction,
        # so nothing can move its links: it is left as it is.
        "to_install": installed is None or installed.strip() != f"{n['version']} ii",
        "source": None,
        "transaction": None,
    }
    entries = [
        entry
        for source in found.get("sources") or []
        for entry in aptplan.parse_sources(str(source["path"]), str(source["content"]))
    ]
    source = aptplan.repository_sources(entries, repo_url, keyring, n["own_source"])
    record["source"] = source
    if source["action"] == "conflict":
        raise StepFailed(f"{source['reason']} Nothing on the host was changed.", {**record, "changed": False})
    if not record["to_install"]:
        return record
    simulated = host.module(
        "cuda13_apt_simulate",
        {
            "package": n["package"],
            "version": n["version"],
            "apt_dir": apt_dir,
            "add_repository": source["action"] == "add",
            "repo_url": repo_url,
            "keyring": keyring,
            "install_keyring_package": _flag(options, "cuda_toolkit_install_keyring_package", True),
            "keyring_package_url": str(options.get("cuda_toolkit_keyring_package_url") or ""),
        },
        check_mode=False,
    )
    text = "\n".join(str(simulated.get(key) or "") for key in ("update_stderr", "stdout", "stderr"))
    transaction = judge_transaction(text, [n["request"]])
    record["transaction"] = transaction
    if not transaction["ok"]:
        raise StepFailed(
            f"{host.name}: {transaction['reason']} Nothing on the host was changed"
            " (apt's transaction was simulated: apt-get -s install --no-install-recommends"
            f" {n['request']}).",
            {**record, "changed": False},
        )
    return record


_plan = plan


def _hold(host: Host, listing: str) -> tuple[list[str], list[str], bool]:
    """Hold each installed driver package not held yet: ``(held, holds_added, changed)``."""
    driver = aptplan.driver_packages(listing)
    added = []
    for package in driver:
        if package["held"]:
            continue
        result = host.module(
            "ansible.builtin.dpkg_selections", {"name": package["package"], "selection": "hold"}
        )
        if result.get("changed"):
            added.append(package["package"])
            host.tell(
                f"{'would hold' if host.check_mode else 'held'} {package['package']} {package['version']}"
            )
    return [p["package"] for p in driver], added, bool(added)


def _parse(function: Any, text: str) -> Any:
    try:
        return function(text)
    except ValueError as exc:
        raise StepFailed(str(exc)) from exc


def _pin(host: Host, selections: str, release: str) -> tuple[dict[str, dict[str, Any]], list[str], bool]:
    """Put each CUDA alternatives group in auto mode into manual mode on its current target.

    NVIDIA's packages register /usr/local/cuda and /usr/local/cuda-<major> with a priority that
    grows with the release; in auto mode installing 13.0 moves /usr/local/cuda under the running
    12.8 stack. ``update-alternatives --set`` puts a group in manual mode on the given target,
    and dpkg's maintainer scripts (``update-alternatives --install``) leave a manual group where
    it is. (community.general.alternatives, ``state: selected``, does nothing when the group
    already points at the value, so an auto group would stay in auto mode.)
    Returns ``(before: {group: parsed query}, pinned: [groups set now], changed)``.
    """
    named = ["cuda", f"cuda-{release.split('.')[0]}", "cuda-12"]
    groups = _parse(lambda text: stack.cuda_alternatives_groups(text, named), selections)
    if not groups:
        return {}, [], False
    queries = host.module("cuda13_apt_read", {"query": groups}, check_mode=False)["queries"]
    before: dict[str, dict[str, Any]] = {}
    pinned: list[str] = []
    changed = False
    for group in groups:
        query = _parse(stack.parse_alternatives_query, queries[group])
        before[group] = query
        if query["status"] == "manual" or query["value"] is None:
            continue
        result = host.module(
            "ansible.builtin.command", {"argv": ["update-alternatives", "--set", group, query["value"]]}
        )
        pinned.append(group)
        changed = changed or bool(result.get("changed"))
        verb = "would pin" if host.check_mode else "pinned"
        host.tell(f"{verb} the alternatives group {group} -> {query['value']}")
    return before, pinned, changed


def _check_pins(host: Host, package: str, before: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise StepFailed naming each pinned group that the installation moved."""
    groups = [group for group, query in before.items() if query["value"] is not None]
    if not groups:
        return
    queries = host.module("cuda13_apt_read", {"query": groups}, check_mode=False)["queries"]
    moved = []
    for group in groups:
        was = before[group]
        now = _parse(stack.parse_alternatives_query, queries[group])
        if now["status"] != "manual" or now["value"] != was["value"]:
            moved.append(
                f"Installing {package} moved the alternatives group {group} ({was['link']})"
                f" from {was['value']} to {now['value']} ({now['status']} mode), under the running stack:"
                " something on the host"
                " sets CUDA alternatives outside dpkg's manual mode. Find it in /var/log/alternatives.log;"
                " rollback puts the group back."
            )
    if moved:
        raise StepFailed(" ".join(moved))


def _read_json(path: str, read: Mapping[str, Any], option: str) -> dict[str, Any] | None:
    """The JSON object of a record read by cuda13_apt_read (None when there is none)."""
    found = read.get(path) or {}
    if not found.get("exists") or found.get("content") is None:
        return None
    try:
        value = json.loads(found["content"])
    except ValueError as exc:
        raise StepFailed(
            f"{path} ({option}) is not JSON: {exc}. Remove it or restore it, and run again."
        ) from exc
    if not isinstance(value, dict):
        raise StepFailed(f"{path} ({option}) is not a JSON object: {found['content'][:200]!r}.")
    return value


def merge_changes(
    previous: Mapping[str, Any] | None,
    *,
    holds_added: list[str],
    held: list[str],
    source: Mapping[str, Any],
    own_source: str,
) -> dict[str, Any]:
    """The apt record after this run: ``{"holds_added": the holds this package added, this run's
    and the earlier runs' (sorted, unique), "held": the driver's packages held now, "source_added":
    the source file this package wrote (an earlier run's, or this one's) or None, "source_used":
    the file NVIDIA's repository is read from}``. A hold or a source the host had before the
    first run is never in ``holds_added``/``source_added``, so a rollback leaves it."""
    previous = previous or {}
    added = source["action"] == "add"
    return {
        "holds_added": sorted(set(previous.get("holds_added") or []) | set(holds_added)),
        "held": list(held),
        "source_added": previous.get("source_added") or (own_source if added else None),
        "source_used": own_source if added else source["entries"][0]["file"],
    }


def install(
    host: Host, options: Mapping[str, Any], plan: Mapping[str, Any] | None = None, *, apt_dir: str = APT_DIR
) -> dict[str, Any]:
    """The toolkit step: install the pinned toolkit beside the running one, changing nothing else.

    ``plan``: :func:`plan`'s record from the preflight earlier in the run (what it decided
    stands); planned again here when None or empty. In order: hold the driver's installed
    packages (``cuda_toolkit_hold_driver``), pin the CUDA alternatives groups where they point
    (``cuda_toolkit_pin_alternatives``, when the toolkit is to install), add NVIDIA's repository
    when the host has no entry for it (installing cuda-keyring first when its keyring is missing
    and ``cuda_toolkit_install_keyring_package``), write the apt record
    (``cuda_toolkit_apt_record``, 0644), install exactly the simulated transaction
    (``ansible.builtin.apt``, every package at the version apt chose, ``install_recommends:
    false``, ``update_cache: true``), check that the pinned groups did not move, check nvcc's
    release. In check mode Ansible's modules report what they would change, and the pins' and
    nvcc's checks are skipped.

    Returns ``{"plan", "apt_changes": {"holds_added", "held", "source_added", "source_used"},
    "transaction", "held": [packages], "pinned": [groups put in manual mode now], "nvcc":
    {"release", "version", "built_on", "build"} or None (check mode), "changed": bool}``.
    Raises StepFailed with the record so far (the plan's refusals, a missing keyring, a moved
    alternatives group, an nvcc of another release, a module that failed).
    """
    if not plan or "to_install" not in plan or (plan.get("to_install") and not plan.get("transaction")):
        plan = _plan(host, options, apt_dir=apt_dir)
    plan = {key: plan.get(key) for key in PLAN_KEYS}
    n = names(options, apt_dir)
    source = plan["source"] or {}
    to_install = bool(plan["to_install"])
    hold = _flag(options, "cuda_toolkit_hold_driver", True)
    pin = _flag(options, "cuda_toolkit_pin_alternatives", True) and to_install
    add = source.get("action") == "add"
    keyring = str(options.get("cuda_toolkit_apt_keyring") or "")
    record_path = str(_option(options, "cuda_toolkit_apt_record"))
    record: dict[str, Any] = {
        "plan": plan,
        "apt_changes": None,
        "transaction": plan["transaction"],
        "held": [],
        "pinned": [],
        "nvcc": None,
        "changed": False,
    }
    try:
        found = host.module(
            "cuda13_apt_read",
            {"packages": hold, "selections": pin, "exists": [keyring] if add else [], "read": [record_path]},
            check_mode=False,
        )
        holds_added: list[str] = []
        if hold:
            record["held"], holds_added, changed = _hold(host, found.get("packages") or "")
            record["changed"] |= changed
        before: dict[str, dict[str, Any]] = {}
        if pin:
            before, record["pinned"], changed = _pin(host, found.get("selections") or "", n["release"])
            record["changed"] |= changed
        if add:
            record["changed"] |= _repository(host, options, keyring, bool(found["exists"].get(keyring)))
        previous = _read_json(record_path, found.get("read") or {}, "cuda_toolkit_apt_record")
        changes = merge_changes(
            previous, holds_added=holds_added, held=record["held"], source=source, own_source=n["own_source"]
        )
        record["apt_changes"] = changes
        written = host.module(
            "cuda13_record", {"files": [{"path": record_path, "content": json_text(changes), "mode": "0644"}]}
        )
        record["changed"] |= bool(written.get("changed"))
        if to_install:
            # Exactly the simulated transaction: every package at the version apt chose then.
            install_list = list(plan["transaction"]["install"])
            host.tell(f"{'would install' if host.check_mode else 'installing'} {', '.join(install_list)}")
            result = host.module(
                "ansible.builtin.apt",
                {"name": install_list, "install_recommends": False, "update_cache": True},
            )
            record["changed"] |= bool(result.get("changed"))
        if host.check_mode:
            return record
        if pin:
            _check_pins(host, n["package"], before)
        record["nvcc"] = _nvcc(host, n)
    except StepFailed as exc:
        raise StepFailed(exc.msg, {**record, **exc.record}) from exc
    return record


def _repository(host: Host, options: Mapping[str, Any], keyring: str, keyring_exists: bool) -> bool:
    """Add NVIDIA's repository, signed with ``keyring`` (installing cuda-keyring first when the
    keyring is missing and that is allowed); returns whether anything changed."""
    changed = False
    install_keyring = _flag(options, "cuda_toolkit_install_keyring_package", True)
    if not keyring_exists and install_keyring:
        result = host.module(
            "ansible.builtin.apt", {"deb": str(_option(options, "cuda_toolkit_keyring_package_url"))}
        )
        changed = bool(result.get("changed"))
    if not keyring_exists and not install_keyring:
        raise StepFailed(
            f"cuda_toolkit_apt_keyring={keyring} does not exist on the host"
            " and cuda_toolkit_install_keyring_package is false: install the repository's"
            " keyring there, or let the role install NVIDIA's cuda-keyring package."
        )
    repo_url = str(_option(options, "cuda_toolkit_apt_repo_url"))
    result = host.module(
        "ansible.builtin.apt_repository",
        {
            "repo": f"deb [signed-by={keyring}] {repo_url} /",
            "filename": str(_option(options, "cuda_toolkit_apt_source_file")),
            "state": "present",
            "update_cache": False,
        },
    )
    if result.get("changed"):
        host.tell(f"{'would add' if host.check_mode else 'added'} NVIDIA's repository {repo_url}")
    return changed or bool(result.get("changed"))


def _nvcc(host: Host, n: Mapping[str, str]) -> dict[str, Any]:
    """nvcc --version of the new toolkit, checked against the release."""
    result = host.module(
        "ansible.builtin.command", {"argv": [f"{n['toolkit_dir']}/bin/nvcc", "--version"]}, check_mode=False
    )
    try:
        nvcc = parse_nvcc_version(str(result.get("stdout") or ""))
    except ParseError as exc:
        raise StepFailed(str(exc)) from exc
    if nvcc["release"] != n["release"]:
        raise StepFailed(
            f"{n['toolkit_dir']}/bin/nvcc reports release {nvcc['release']}, not"
            f" cuda_toolkit_release={n['release']}: the package"
            f" {n['package']}={n['version']} does not hold that release.",
            {"nvcc": nvcc},
        )
    return nvcc


def revert(host: Host, options: Mapping[str, Any]) -> dict[str, Any]:
    """The rollback's apt part: undo what the toolkit step recorded, and only that.

    Reads ``rollback_apt_record`` (else ``cuda_toolkit_apt_record``); releases each hold of
    ``holds_added`` (dpkg selection ``install``), removes ``source_added`` and then reads apt's
    sources again (``apt-get update``, which fails when they are broken), removes the record. A
    hold or a source the host had before the run stays. No record: nothing to do.

    Returns ``{"record_path", "record": the record or None, "released": [packages whose hold was
    released now], "source_removed": path or None, "apt_updated": bool, "record_removed": bool,
    "changed": bool}``. In check mode Ansible's modules report what they would change.
    """
    path = str(options.get("rollback_apt_record") or _option(options, "cuda_toolkit_apt_record"))
    found = host.module("cuda13_apt_read", {"read": [path]}, check_mode=False)
    out: dict[str, Any] = {
        "record_path": path,
        "record": None,
        "released": [],
        "source_removed": None,
        "apt_updated": False,
        "record_removed": False,
        "changed": False,
    }
    record = _read_json(path, found.get("read") or {}, "rollback_apt_record")
    if record is None:
        return out
    out["record"] = record
    try:
        for package in record.get("holds_added") or []:
            result = host.module("ansible.builtin.dpkg_selections", {"name": package, "selection": "install"})
            if result.get("changed"):
                out["released"].append(package)
                out["changed"] = True
        source = record.get("source_added")
        if source:
            result = host.module("ansible.builtin.file", {"path": source, "state": "absent"})
            out["source_removed"] = source
            out["changed"] |= bool(result.get("changed"))
            # apt reads its sources again: it fails here when they are broken.
            result = host.module("ansible.builtin.apt", {"update_cache": True})
            out["apt_updated"] = True
            out["changed"] |= bool(result.get("changed"))
        result = host.module("ansible.builtin.file", {"path": path, "state": "absent"})
        out["record_removed"] = True
        out["changed"] |= bool(result.get("changed"))
    except StepFailed as exc:
        raise StepFailed(exc.msg, {**out, **exc.record}) from exc
    return out
