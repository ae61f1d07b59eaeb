"""Filters over apt on the host (thin wrappers over cuda13_upgrade.aptplan)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import aptplan
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_apt_transaction
    short_description: Judge the output of apt-get -s install for the requested packages.
    positional: _input, requested
    options:
      _input: {description: the output of apt-get -s install, type: str, required: true}
      requested: {description: the packages asked for (name=version), type: list, required: true}
  - name: cuda13_apt_driver_packages
    short_description: The installed driver, kernel-module and dkms packages in a dpkg-query listing.
    options:
      _input: {description: "dpkg-query -W listing (package TAB version TAB status)", type: str}
  - name: cuda13_apt_sources
    short_description: The apt source entries of files read from the host.
    options:
      _input: {description: "[{path, content}] or slurp results (source, content, encoding)", type: list}
  - name: cuda13_apt_repository
    short_description: Add, reuse or refuse NVIDIA's repository among the host's source entries.
    positional: _input, repo_url, keyring, own_file
    options:
      _input: {description: entries from cuda13_apt_sources, type: list, required: true}
      repo_url: {description: the repository's URL, type: str, required: true}
      keyring: {description: the Signed-By keyring the role would name, type: str, required: true}
      own_file: {description: the file the role would write, type: str, required: true}
"""

EXAMPLES = r"""
verdict: "{{ sim.stdout | cuda13_apt_transaction(['cuda-toolkit-13-0=13.0.2-1']) }}"
holds: "{{ query.stdout | cuda13_apt_driver_packages }}"
source: "{{ files | cuda13_apt_sources | cuda13_apt_repository(url, keyring, '/etc/apt/cuda.list') }}"
"""

RETURN = r"""
  _value:
    description: >-
      cuda13_apt_transaction: {ok, actions, install, refused, reason} (aptplan.check_transaction; a
      simulation that installs none of the requested packages gives ok false and apt's errors as
      reason); cuda13_apt_driver_packages: [{package, version, kind, held}];
      cuda13_apt_sources: [{file, line, types, uri, suite, components, signed_by, enabled}];
      cuda13_apt_repository: {action (add, reuse, conflict), entries, signed_by, reason}.
"""


def _text(value, name):
    if not isinstance(value, str):
        raise AnsibleFilterError(f"{name} expects a command's output as a string, got {value!r}")
    return value


def cuda13_apt_transaction(text, requested):
    text = _text(text, "cuda13_apt_transaction")
    if not isinstance(requested, list) or not all(isinstance(r, str) for r in requested):
        raise AnsibleFilterError(
            f"cuda13_apt_transaction expects a list of name=version strings, got {requested!r}"
        )
    try:
        return aptplan.check_transaction(text, requested)
    except ValueError as e:
        return {"ok": False, "actions": [], "install": [], "refused": [], "reason": str(e)}


def cuda13_apt_driver_packages(text):
    return aptplan.driver_packages(_text(text, "cuda13_apt_driver_packages"))


def cuda13_apt_sources(files):
    import base64

    if not isinstance(files, list):
        raise AnsibleFilterError(f"cuda13_apt_sources expects a list of {{path, content}}, got {files!r}")
    entries = []
    for f in files:
        # slurp's results name the file "source"
        path = f.get("path", f.get("source")) if isinstance(f, Mapping) else None
        if path is None or "content" not in f:
            raise AnsibleFilterError(f"cuda13_apt_sources expects {{path, content}} items, got {f!r}")
        content = f["content"]
        if f.get("encoding") == "base64":
            content = base64.b64decode(content).decode("utf-8", errors="replace")
        entries += aptplan.parse_sources(str(path), str(content))
    return entries


def cuda13_apt_repository(entries, repo_url, keyring, own_file):
    if not isinstance(entries, list):
        raise AnsibleFilterError(f"cuda13_apt_repository expects source entries as a list, got {entries!r}")
    return aptplan.repository_sources(entries, str(repo_url), str(keyring), str(own_file))


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_apt_transaction": cuda13_apt_transaction,
                "cuda13_apt_driver_packages": cuda13_apt_driver_packages,
                "cuda13_apt_sources": cuda13_apt_sources,
                "cuda13_apt_repository": cuda13_apt_repository,
            }
        )
