"""apt on the managed host, read-only: what the toolkit step asks before it changes anything.

Runs on the managed host, standard library only (the modules ``cuda13_apt_read`` and
``cuda13_apt_simulate`` of ``library/``). Neither changes the host: in check mode they run
the same. The control node judges what they return (``cuda13_upgrade.aptplan``,
``cuda13_upgrade.stack``, through ``cuda13_upgrade.steps.toolkit``).

:func:`read` (``cuda13_apt_read``) answers, in one run, any of: the installed version and
status of a package (``dpkg-query --showformat '${Version} ${db:Status-Abbrev}' --show PKG``);
the text of every apt source file (``sources.list``, ``*.list``, ``*.sources`` in ``/etc/apt``
and ``/etc/apt/sources.list.d``, :func:`source_files`); the installed packages
(``dpkg-query -W -f '${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``);
``update-alternatives --get-selections`` and ``--query`` of given groups; whether paths exist;
the text of records.

:func:`simulate` (``cuda13_apt_simulate``) is apt's transaction, simulated:
``apt-get -s install --no-install-recommends PKG=VER`` in a scratch apt state - its own
lists directory, no package cache written, the host's sources copied in, NVIDIA's repository
added when the host has no entry for it (signed with the host's keyring, or with the file of
NVIDIA's cuda-keyring package unpacked into the scratch state when the keyring is missing
and installing that package is allowed) - so that the host's apt state and sources are not
touched. The scratch directory is removed in every case.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import tempfile
import urllib.request

#: The file names apt reads its sources from (sources.list(5)), as the toolkit step looks for them.
SOURCE_PATTERNS = ("sources.list", "*.list", "*.sources")

#: Seconds a download of the cuda-keyring package may take.
DOWNLOAD_TIMEOUT_S = 60


def _run(argv: list, env: dict | None = None) -> dict:
    """``{"rc", "stdout", "stderr"}`` of a command; rc 127 and the OS error when it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    except OSError as exc:
        return {"rc": 127, "stdout": "", "stderr": f"{argv[0]}: {exc}"}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _failed(what: str, result: dict) -> str:
    text = (result["stderr"] or result["stdout"]).strip()
    return f"{what} failed (rc {result['rc']}): {text or '(no output)'}"


def source_files(apt_dir: str = "/etc/apt") -> list:
    """The apt source files of the host, sorted by path.

    Files named ``sources.list``, ``*.list`` or ``*.sources`` directly in ``apt_dir`` and in
    ``apt_dir/sources.list.d`` (not hidden ones; a symlink counts as the file it names, as
    apt reads it).
    """
    found = []
    for directory in (apt_dir, os.path.join(apt_dir, "sources.list.d")):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.startswith("."):
                continue
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in SOURCE_PATTERNS):
                continue
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                found.append(path)
    return sorted(found)


def read_sources(apt_dir: str = "/etc/apt") -> list:
    """``[{"path", "content"}]`` of :func:`source_files` (text, undecodable bytes replaced).
    Raises OSError naming a file that cannot be read."""
    out = []
    for path in source_files(apt_dir):
        with open(path, "rb") as handle:
            out.append({"path": path, "content": handle.read().decode("utf-8", errors="replace")})
    return out


def installed_version(package: str) -> str | None:
    """``"VERSION STATUS"`` of ``package`` as dpkg has it (``"13.0.2-1 ii"``), or None where
    dpkg-query does not know it (or cannot run)."""
    result = _run(["dpkg-query", "--showformat", "${Version} ${db:Status-Abbrev}", "--show", package])
    return result["stdout"].strip() if result["rc"] == 0 else None


def read_records(paths: list) -> dict:
    """``{path: {"exists": bool, "content": text or None}}``."""
    found = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                found[path] = {"exists": True, "content": handle.read()}
        except FileNotFoundError:
            found[path] = {"exists": os.path.lexists(path), "content": None}
        except (OSError, UnicodeDecodeError):
            found[path] = {"exists": True, "content": None}
    return found


#: The argument spec of the module cuda13_apt_read.
APT_READ_SPEC = {
    "package": {"type": "str"},
    "sources": {"type": "bool", "default": False},
    "apt_dir": {"type": "path", "default": "/etc/apt"},
    "packages": {"type": "bool", "default": False},
    "selections": {"type": "bool", "default": False},
    "query": {"type": "list", "elements": "str", "default": []},
    "exists": {"type": "list", "elements": "path", "default": []},
    "read": {"type": "list", "elements": "path", "default": []},
}


def read(params: dict) -> dict:
    """The module cuda13_apt_read: each answer asked for.

    Returns ``{"changed": False, "installed": "VERSION STATUS" or None (with ``package``),
    "sources": [{"path", "content"}] (with ``sources``), "packages": dpkg-query's listing
    (with ``packages``), "selections": update-alternatives --get-selections (with
    ``selections``), "queries": {group: update-alternatives --query GROUP} (each of
    ``query``), "exists": {path: bool}, "read": {path: {"exists", "content"}}}``. Fails with
    the command and its error when a listing, the selections or a group's query cannot be
    read, or a source file cannot be read.
    """
    result: dict = {"changed": False}
    if params.get("package"):
        result["installed"] = installed_version(params["package"])
    if params.get("sources"):
        try:
            result["sources"] = read_sources(params.get("apt_dir") or "/etc/apt")
        except OSError as exc:
            return {**result, "failed": True, "msg": f"cannot read an apt source file: {exc}"}
    if params.get("packages"):
        listing = _run(["dpkg-query", "-W", "-f", "${binary:Package}\t${Version}\t${db:Status-Abbrev}\n"])
        if listing["rc"] != 0:
            return {**result, "failed": True, "msg": _failed("dpkg-query -W", listing)}
        result["packages"] = listing["stdout"]
    if params.get("selections"):
        selections = _run(["update-alternatives", "--get-selections"])
        if selections["rc"] != 0:
            return {
                **result,
                "failed": True,
                "msg": _failed("update-alternatives --get-selections", selections),
            }
        result["selections"] = selections["stdout"]
    queries = {}
    for group in params.get("query") or []:
        answer = _run(["update-alternatives", "--query", group])
        if answer["rc"] != 0:
            return {**result, "failed": True, "msg": _failed(f"update-alternatives --query {group}", answer)}
        queries[group] = answer["stdout"]
    result["queries"] = queries
    result["exists"] = {path: os.path.exists(path) for path in params.get("exists") or []}
    result["read"] = read_records(params.get("read") or [])
    return result


def apt_read_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_apt_read (:func:`read`); the same in check mode."""
    del check_mode
    return read(params)


#: The argument spec of the module cuda13_apt_simulate.
APT_SIMULATE_SPEC = {
    "package": {"type": "str"},
    "version": {"type": "str"},
    "apt_dir": {"type": "path", "default": "/etc/apt"},
    "add_repository": {"type": "bool", "default": False},
    "repo_url": {"type": "str"},
    "keyring": {"type": "path"},
    "install_keyring_package": {"type": "bool", "default": True},
    "keyring_package_url": {"type": "str"},
    "requests": {"type": "list", "elements": "str", "default": []},
    "release_holds": {"type": "list", "elements": "str", "default": []},
    "dpkg_status": {"type": "path", "default": "/var/lib/dpkg/status"},
}


def released_holds(status: str, names: list) -> str:
    """dpkg's status file ``status`` with the packages ``names`` no longer held: each of their
    stanzas' ``Status: hold ...`` line made ``Status: install ...`` (dpkg's selection state is
    the first word; dpkg(1), "Package selection states"). Other stanzas are left as they are."""
    wanted = set(names)
    out, package = [], None
    for line in status.splitlines(keepends=True):
        if line.startswith("Package:"):
            package = line.split(":", 1)[1].strip()
        elif not line.strip():
            package = None
        if package in wanted and line.startswith("Status: hold "):
            line = "Status: install " + line[len("Status: hold ") :]
        out.append(line)
    return "".join(out)


def apt_options(scratch: str) -> list:
    """The ``-o`` options that point apt at the scratch state: its sources, lists and archives,
    no package cache written, its methods run as root."""
    return [
        "-o",
        f"Dir::Etc::SourceList={scratch}/sources.list",
        "-o",
        f"Dir::Etc::SourceParts={scratch}/sources.list.d",
        "-o",
        f"Dir::State::Lists={scratch}/lists",
        "-o",
        f"Dir::Cache::Archives={scratch}/archives",
        "-o",
        "Dir::Cache::pkgcache=",
        "-o",
        "Dir::Cache::srcpkgcache=",
        "-o",
        "APT::Sandbox::User=root",
    ]


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _simulate_in(scratch: str, params: dict) -> dict:
    for sub in ("lists/partial", "archives/partial", "sources.list.d", "keyring"):
        os.makedirs(os.path.join(scratch, sub), mode=0o700, exist_ok=True)
    copied = []
    for index, source in enumerate(source_files(params.get("apt_dir") or "/etc/apt")):
        name = f"{index:03d}-{os.path.basename(source)}"
        with open(source, "rb") as handle:
            _write(os.path.join(scratch, "sources.list.d", name), handle.read())
        copied.append(source)
    keyring = params.get("keyring") or ""
    add = bool(params.get("add_repository"))
    keyring_here = not add or os.path.exists(keyring)
    unpacked = False
    if add and not keyring_here and params.get("install_keyring_package"):
        # Not installed: cuda-keyring's file is unpacked into the scratch state only.
        url = params.get("keyring_package_url") or ""
        deb = os.path.join(scratch, "cuda-keyring.deb")
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 - the option's URL
                _write(deb, response.read())
        except (OSError, ValueError) as exc:
            return {"failed": True, "msg": f"cannot download {url}: {exc}"}
        unpack = _run(["dpkg-deb", "-x", deb, os.path.join(scratch, "keyring")])
        if unpack["rc"] != 0:
            return {"failed": True, "msg": _failed(f"dpkg-deb -x {deb}", unpack)}
        unpacked = True
    signed_by = keyring if keyring_here else f"{scratch}/keyring{keyring}"
    if add:
        line = f"deb [signed-by={signed_by}] {params.get('repo_url') or ''} /\n"
        _write(os.path.join(scratch, "sources.list.d", "zzz-cuda13-upgrade.list"), line.encode("utf-8"))
    env = {**os.environ, "LANG": "C"}
    options = apt_options(scratch)
    if params.get("release_holds"):
        # The move releases the driver's holds first: apt resolves it with them released, in a
        # copy of dpkg's status (apt refuses to move a held package: "E: Error,
        # pkgProblemResolver::Resolve generated breaks, this may be caused by held packages.").
        with open(params.get("dpkg_status") or "/var/lib/dpkg/status", encoding="utf-8") as handle:
            text = released_holds(handle.read(), list(params["release_holds"]))
        _write(os.path.join(scratch, "status"), text.encode("utf-8"))
        options += ["-o", f"Dir::State::status={scratch}/status"]
    update = _run(["apt-get", "-q", "update", *options], env=env)
    requests = list(params.get("requests") or []) or [f"{params['package']}={params['version']}"]
    simulation = _run(["apt-get", "-s", "install", "--no-install-recommends", *options, *requests], env=env)
    return {
        "sources": copied,
        "signed_by": signed_by if add else None,
        "keyring_unpacked": unpacked,
        "update_rc": update["rc"],
        "update_stderr": update["stderr"],
        "rc": simulation["rc"],
        "stdout": simulation["stdout"],
        "stderr": simulation["stderr"],
    }


def simulate(params: dict) -> dict:
    """The module cuda13_apt_simulate: apt's transaction of ``package=version`` (or of every entry
    of ``requests``: ``name=version`` or ``name``) in a scratch state.

    Returns ``{"changed": False, "sources": [host files copied in], "signed_by": the keyring
    NVIDIA's added entry names (None when not added), "keyring_unpacked": bool, "update_rc",
    "update_stderr" (apt-get -q update), "rc", "stdout", "stderr" (apt-get -s install)}``; a
    non-zero rc is returned, not failed (the control node reads apt's errors). Fails when
    cuda-keyring cannot be downloaded or unpacked, or the scratch state cannot be made.
    """
    if not params.get("requests") and not (params.get("package") and params.get("version")):
        return {"changed": False, "failed": True, "msg": "give requests, or package and version"}
    try:
        scratch = tempfile.mkdtemp(prefix="cuda13-apt-")
    except OSError as exc:
        return {"changed": False, "failed": True, "msg": f"cannot make a scratch apt state: {exc}"}
    try:
        result = _simulate_in(scratch, params)
    except OSError as exc:
        result = {"failed": True, "msg": f"scratch apt state {scratch}: {exc}"}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"changed": False, **result}


def apt_simulate_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_apt_simulate (:func:`simulate`); the same in check mode."""
    del check_mode
    return simulate(params)
