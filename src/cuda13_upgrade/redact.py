"""Secrets kept out of every record and log the project writes on the control node.

One function, :func:`redact`, is applied where the run's report files are written
(:mod:`cuda13_upgrade.reportfiles`, the command's ``ansible-<command>.log`` and
``run.json``, ``summary.*``) and where the command prints a task's line
(:mod:`cuda13_upgrade.progress`). It masks, with :data:`MASK`:

* the values of a systemd unit's ``Environment=`` assignments (systemd.exec(5),
  "Environment="), in unit text (``systemctl cat``), in ``systemctl show -p
  Environment`` output and in the same texts inside JSON: ``Environment=HF_TOKEN=hf_x``
  becomes ``Environment=HF_TOKEN=***``. The values of :data:`PLAIN_VARIABLES` (the
  paths the project itself sets in its drop-in and reads for the caches) are kept;
* a URL's userinfo (RFC 3986 section 3.2.1, ``scheme://user:password@host/``):
  ``https://user:token@pypi.example/simple`` becomes ``https://***@pypi.example/simple``;
* the value of a server's ``--api-key`` argument (SGLang's server argument that sets
  the bearer key), as ``--api-key=<value>``, ``--api-key <value>`` or an argument
  list's next element: ``--api-key ***``;
* a Slack incoming webhook's URL, whose path is its key
  (``https://hooks.slack.com/services/T.../B.../...``, Slack's "Sending messages using
  incoming webhooks"): ``https://hooks.slack.com/***``.

A mapping under a key ``environment`` (a process's or unit's environment as a dict)
keeps only the values of :data:`PLAIN_VARIABLES`. Under a key of :data:`SECRET_URL_KEYS`
(``cuda13_notify``, the webhooks the rollout notifies, :mod:`cuda13_upgrade.notify`)
every http(s) URL keeps only its scheme, host and port (:func:`redact_url`): any
webhook's path may be its key; a value that is not a clean http(s) URL keeps at most its
scheme and host. Under a key of :data:`USERINFO_URL_KEYS` (``cuda13_block_on_alerts``, whose
URL's ``user:password@`` is sent as basic authentication) a string that begins with a scheme
loses everything between ``://`` and its last ``@`` (:func:`redact_userinfo`), whatever the
password holds (a quote, a ``/``, a space). Nothing else is changed; a text
without secrets comes back equal, and :func:`redact` of a redacted value is the same
value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "MASK",
    "PLAIN_VARIABLES",
    "SECRET_FLAGS",
    "SECRET_URL_KEYS",
    "USERINFO_URL_KEYS",
    "redact",
    "redact_environment",
    "redact_text",
    "redact_url",
    "redact_userinfo",
    "redact_urls",
]

#: What a secret is replaced with.
MASK = "***"

#: Environment variables whose values are paths the project sets or reads (the switch's
#: drop-in: ``steps/switch.py``; the caches: ``service.CACHE_VARIABLES``; who the unit runs
#: as: ``service.service_identity``) and are kept in the records; every other value is masked.
PLAIN_VARIABLES = frozenset(
    {
        "CUDA_HOME",
        "TRITON_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "TORCH_EXTENSIONS_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "HOME",
        "USER",
        "XDG_CACHE_HOME",
        "TRITON_HOME",
        "TMPDIR",
        "PATH",
        "LD_LIBRARY_PATH",
    }
)

#: Command-line flags whose value is a secret.
SECRET_FLAGS = ("--api-key", "--admin-api-key")

#: Keys whose values' URLs are secrets as a whole (a webhook URL's path is its key).
SECRET_URL_KEYS = frozenset({"cuda13_notify"})

#: Keys whose values' URLs may hold a ``user:password@`` that no text pattern can be trusted to
#: find (a password with a quote, a ``/`` or a space): :func:`redact_userinfo`.
USERINFO_URL_KEYS = frozenset({"cuda13_block_on_alerts"})

# A Slack webhook URL (incoming webhooks and workflow webhooks): its path is the key.
_SLACK_HOOK = re.compile(r"(?P<base>\bhttps?://hooks\.slack\.com)/[^\s\"'\\<>|]+")

# scheme://userinfo@ : userinfo is everything up to the first "@" before the host, without
# "/", whitespace or quotes (RFC 3986: userinfo holds no "/" or "@").
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@'\"\\]+)@")

# --api-key=VALUE, --api-key VALUE, and the same inside a list or JSON ("--api-key", "VALUE").
_FLAGS = re.compile(
    r"(?P<flag>(?<![\w-])(?:" + "|".join(re.escape(f) for f in SECRET_FLAGS) + r"))"
    r"(?P<sep>=|(?:[\s\"',\[\]]|\\[\"n])+)(?P<value>[^\s\"',\]\\]+)"
)

# Environment= and what follows it on its line (a real newline, or "\n" written into JSON).
_ENVIRONMENT = re.compile(r"(?:(?<![A-Za-z0-9_])|(?<=\\n))Environment=(?P<rest>(?:(?!\\n)[^\n])*)")

# One assignment of an Environment= line: quoted ("A=b c", 'A=b', \"A=b\" in JSON) or bare.
_ASSIGNMENT = re.compile(
    r"(?P<open>\\\"|\"|')(?P<qname>[A-Za-z_][A-Za-z0-9_]*)=(?P<qvalue>.*?)(?P=open)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s\"'\\]*)"
)


def _assignment(match: re.Match[str]) -> str:
    if match.group("open"):
        name, value, quote = match.group("qname"), match.group("qvalue"), match.group("open")
        kept = value if name in PLAIN_VARIABLES or value == MASK else MASK
        return f"{quote}{name}={kept}{quote}"
    name, value = match.group("name"), match.group("value")
    kept = value if name in PLAIN_VARIABLES or value in ("", MASK) else MASK
    return f"{name}={kept}"


def _environment_line(match: re.Match[str]) -> str:
    return "Environment=" + _ASSIGNMENT.sub(_assignment, match.group("rest"))


def redact_text(text: str) -> str:
    """``text`` with the secrets of the module's list masked (``str`` in, ``str`` out)."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _SLACK_HOOK.sub(lambda m: f"{m.group('base')}/{MASK}", text)
    text = _FLAGS.sub(lambda m: f"{m.group('flag')}{m.group('sep')}{MASK}", text)
    return _ENVIRONMENT.sub(_environment_line, text)


def redact_environment(environment: Mapping[str, Any]) -> dict[str, Any]:
    """An environment (``{name: value}``) with every value but those of
    :data:`PLAIN_VARIABLES` masked."""
    return {k: (v if k in PLAIN_VARIABLES else MASK) for k, v in environment.items()}


# The scheme of a value that looks like a URL (``https://``, a mistyped ``htps://``).
_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
# A host name, an IPv4 address or a bracketed IPv6 one, then anything (the port, the path...).
_HOST = re.compile(
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?P<after>.*)", re.DOTALL
)


def _unsafe(text: str) -> bool:
    """Whether ``text`` holds whitespace or a control character (C0, DEL, C1)."""
    return any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _masked_after_host(text: str) -> str:
    """A value that is not a clean http(s) URL, as records show it: its scheme and host kept and
    everything after the host masked (``htps://hooks.example.com/***``,
    ``hooks.example.com/***``), or the whole value masked (``https://***``, ``***``) when no
    host can be told apart: a userinfo (an ``@`` anywhere), whitespace or a control character.
    A bare word (``slack``, ``5``) comes back as given."""
    found = _SCHEME.fullmatch(text)
    scheme, rest = (found.group("scheme"), found.group("rest")) if found else ("", text)
    prefix = f"{scheme}://" if scheme and not _unsafe(scheme) else ""
    host = _HOST.fullmatch(rest)
    if "@" in rest or _unsafe(rest) or host is None:
        return f"{prefix}{MASK}"
    return f"{prefix}{host.group('host')}" + (f"/{MASK}" if host.group("after") else "")


def redact_url(url: str) -> str:
    """A URL whose path is a secret, as records show it: ``scheme://host[:port]/***``
    (``https://hooks.slack.com/services/T0/B0/x`` -> ``https://hooks.slack.com/***``); its
    userinfo, path, query and fragment are left out. A URL with none of these comes back as
    given. A value that is not a clean http(s) URL (a bad port, a password with a ``/``, a
    mistyped or missing scheme, whitespace or a control character) keeps at most its scheme and
    host: ``https://hooks.example.com:99999/hook/x`` -> ``https://hooks.example.com/***``,
    ``https://u:p/w@h.example/x`` -> ``https://***``, ``hooks.example.com/hook/x`` ->
    ``hooks.example.com/***``; a bare word (``slack``) comes back as given."""
    text = str(url).strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return _masked_after_host(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or _unsafe(text):
        return _masked_after_host(text)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    base = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    if parts.path in ("", "/") and not parts.query and not parts.fragment and parts.username is None:
        return text
    return f"{base}/{MASK}"


# A value that begins with a scheme (``http://``, a mistyped ``htp://``), after any blanks.
_LEADING_SCHEME = re.compile(r"(?P<scheme>\s*[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>.*)", re.DOTALL)


def redact_userinfo(value: Any) -> Any:
    """``value`` (a string, or mappings and lists of them) with each string that begins with a
    scheme masked from ``://`` to its last ``@``: ``http://ops:pa/ss@prom:9090`` ->
    ``http://***@prom:9090``, ``http://ops:it's@prom`` -> ``http://***@prom`` (RFC 3986 gives
    userinfo no ``@``, so the last one ends it in any URL a client can use); other strings by
    :func:`redact_text`."""
    if isinstance(value, str):
        found = _LEADING_SCHEME.match(value)
        if found and "@" in found.group("rest"):
            return f"{found.group('scheme')}{MASK}@{found.group('rest').rpartition('@')[2]}"
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: redact_userinfo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out = [redact_userinfo(item) for item in value]
        return out if isinstance(value, list) else tuple(out)
    return value


def redact_urls(value: Any) -> Any:
    """``value`` (a string, or mappings and lists of them) with every http(s) URL in it
    masked by :func:`redact_url`; other strings by :func:`redact_text`."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return {k: redact_urls(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out = [redact_urls(item) for item in value]
        return out if isinstance(value, list) else tuple(out)
    return value


def redact(value: Any) -> Any:
    """``value`` with its secrets masked: strings by :func:`redact_text`, mappings and
    lists element by element (a list's element after ``--api-key`` masked; a mapping
    under the key ``environment`` by :func:`redact_environment`; a value under a key of
    :data:`SECRET_URL_KEYS` by :func:`redact_urls`, of :data:`USERINFO_URL_KEYS` by
    :func:`redact_userinfo`), other values as they are. Returns a
    new value; the given one is not changed."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            k: (
                redact_environment(v)
                if str(k).lower() == "environment" and isinstance(v, Mapping)
                else redact_urls(v)
                if k in SECRET_URL_KEYS
                else redact_userinfo(v)
                if k in USERINFO_URL_KEYS
                else redact(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        out = []
        for i, item in enumerate(value):
            after_flag = i > 0 and isinstance(value[i - 1], str) and value[i - 1] in SECRET_FLAGS
            out.append(MASK if after_flag and isinstance(item, str) else redact(item))
        return out if isinstance(value, list) else tuple(out)
    return value
