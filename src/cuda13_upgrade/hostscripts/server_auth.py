"""The API key of an SGLang server started with ``--api-key``, sent as SGLang checks it.

Runs on the managed host, standard library only (the modules ``cuda13_bench`` and
``cuda13_service`` use it).

SGLang's rule (``python/sglang/srt/utils.py``, ``add_api_key_middleware``, sgl-project/sglang
0.4 and 0.5): a server started with ``--api-key KEY`` (``ServerArgs.api_key``) answers every
request whose ``Authorization`` header is not exactly ``Bearer KEY`` with 401 and
``{"error": "Unauthorized"}``, except ``OPTIONS`` requests and the paths that start with
``/health`` (``/health``, ``/health_generate``) or ``/metrics``. So the benchmark's
``/v1/completions``, ``/generate`` and ``/flush_cache`` and the restart's ``/get_server_info``
need the key; the readiness check ``/health_generate`` does not.

The key is read on the host, from the command line of the unit's processes
(``/proc/<pid>/cmdline`` of the main process first, then of every process of the unit's
control group): that is the server that answers, whatever the unit's files say (its
``ExecStart=``, the profile drop-in, or ``${VAR}`` that systemd expanded from
``Environment=``/``EnvironmentFile=``). It is held in memory only: never returned, printed or
written (:func:`bearer` puts it in the requests' header and nowhere else).
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator, Sequence

#: SGLang's server option (ServerArgs.api_key).
OPTION = "--api-key"


def api_key_from_argv(argv: Sequence[str]) -> str | None:
    """The value of ``--api-key`` in a server's argv (``--api-key KEY`` or ``--api-key=KEY``;
    the last one wins, as argparse takes it), or None when there is none or it is empty."""
    key = None
    words = [str(w) for w in argv]
    for i, word in enumerate(words):
        if word == OPTION and i + 1 < len(words):
            key = words[i + 1]
        elif word.startswith(OPTION + "="):
            key = word[len(OPTION) + 1 :]
    return key or None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    argv = raw.decode("utf-8", "replace").split("\0")
    return argv[:-1] if argv and argv[-1] == "" else argv


def _show(unit: str, prop: str) -> str:
    try:
        out = subprocess.run(
            ["systemctl", "show", f"--property={prop}", "--value", unit],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def unit_pids(unit: str) -> list[int]:
    """The unit's main process first, then the other processes of its control group (cgroup v2,
    or v1's name=systemd hierarchy); [] when none runs or systemd cannot be asked."""
    main = _show(unit, "MainPID")
    pids = [int(main)] if main.isdigit() and int(main) > 0 else []
    group = _show(unit, "ControlGroup")
    if group:
        for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
            try:
                with open(f"{root}{group}/cgroup.procs", encoding="ascii") as handle:
                    found = [int(line) for line in handle.read().split() if line.isdigit()]
            except OSError:
                continue
            pids += [pid for pid in found if pid not in pids]
            break
    return pids


def api_key_of_pids(pids: Iterable[int]) -> str | None:
    """The ``--api-key`` of the first of ``pids`` whose command line carries one, or None."""
    for pid in pids:
        key = api_key_from_argv(_cmdline(pid))
        if key:
            return key
    return None


def unit_api_key(unit: str | None) -> str | None:
    """The ``--api-key`` the unit's running server was started with, or None (no unit, not
    running, no key). See the module docstring for where it is read."""
    if not unit:
        return None
    return api_key_of_pids(unit_pids(unit))


class _Bearer(urllib.request.BaseHandler):
    """Adds ``Authorization: Bearer <key>`` to each request that has none, as an unredirected
    header (urllib does not carry it to another host on a redirect)."""

    def __init__(self, key: str) -> None:
        self._key = key

    def __repr__(self) -> str:  # never the key
        return "<bearer token>"

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        if not request.has_header("Authorization"):
            request.add_unredirected_header("Authorization", f"Bearer {self._key}")
        return request

    https_request = http_request


@contextlib.contextmanager
def bearer(key: str | None) -> Iterator[bool]:
    """Within the block, every ``urllib.request.urlopen`` of this process sends ``key`` as the
    bearer token (SGLang's ``--api-key`` check); nothing changes when ``key`` is None or empty.
    Yields whether a key is sent. The opener that was installed before is put back after."""
    if not key:
        yield False
        return
    previous = getattr(urllib.request, "_opener", None)
    urllib.request.install_opener(urllib.request.build_opener(_Bearer(key)))
    try:
        yield True
    finally:
        urllib.request._opener = previous  # what install_opener sets; None: the default opener


#: Fields of SGLang's /get_server_info that hold a secret: it returns
#: ``dataclasses.asdict(server_args)`` (python/sglang/srt/entrypoints/http_server.py), which has
#: the server's ``api_key`` and, in later releases, ``admin_api_key``.
SECRET_FIELDS = ("api_key", "admin_api_key")


def without_secrets(server_info: dict) -> dict:
    """``server_info`` (a /get_server_info object) without :data:`SECRET_FIELDS`."""
    return {k: v for k, v in server_info.items() if k not in SECRET_FIELDS}


#: What a request answered 401 means, for the messages (SGLang's --api-key check).
UNAUTHORIZED = (
    "the server answered 401 Unauthorized: it was started with --api-key (SGLang's option), and "
    "no key was found on the command line of the unit {unit}'s processes to send as "
    "'Authorization: Bearer <key>'"
)


def unauthorized_message(unit: str | None, sent: bool) -> str:
    """The message for a 401: the key was not found (``sent`` False), or it was refused."""
    if sent:
        return (
            "the server answered 401 Unauthorized to the key on the command line of the unit "
            f"{unit}'s processes (--api-key): the server that answers is not the one the unit runs"
        )
    if not unit:
        return (
            "the server answered 401 Unauthorized: it was started with --api-key (SGLang's "
            "option), and no unit was named to read the key from"
        )
    return UNAUTHORIZED.format(unit=unit)
