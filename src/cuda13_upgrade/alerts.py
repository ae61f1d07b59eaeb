"""The alert gate: a batch of the rollout starts only while Prometheus has no matching active alert.

After kured's ``--prometheus-url``, ``--alert-filter-regexp``, ``--alert-filter-match-only`` and
``--alert-firing-only`` (github.com/kubereboot/kured, README "Blocking Reboots via Alerts"): no
node reboots while matching alerts are active. Here: no batch starts (the canary included), the
rollout asks again every ``interval_s`` while its window lasts, and the hosts a window closed on
are reported with the alerts that held them (:func:`cuda13_upgrade.steps.fleet.batch_gate`).

The option ``cuda13_block_on_alerts`` (one value for the whole rollout): ``{}`` (no gate), a URL
(the same as ``{url: URL}``), or a mapping of

- ``url`` (required): the Prometheus server's base URL, ``http://`` or ``https://``, with the
  path prefix of ``--web.route-prefix`` if any (``https://ops.example/prometheus``); no query or
  fragment, whitespace, control character, port 0 or path that is not ASCII. A ``user:password@``
  in it (each ``/``, ``?``, ``#`` and ``@`` of them percent-encoded) is sent as HTTP basic
  authentication, never to another host a redirect leads to, and masked (``***``) in every
  message and record (:func:`cuda13_upgrade.redact.redact_userinfo`).
- ``match``: only the alerts it matches count (kured's ``--alert-filter-match-only``);
- ``ignore``: the alerts it matches do not count (kured's ``--alert-filter-regexp``). Each is a
  regular expression on the alert's name (``alertname``), a mapping of label names to regular
  expressions that must all match (a label the alert lacks reads as ``""``, as in PromQL), or a
  list of these (any one matches). An expression must match the whole value, as PromQL's ``=~``
  does (Python's :func:`re.fullmatch`).
- ``firing_only`` (default true): pending alerts (their ``for:`` not yet over) do not count;
  false counts them too (kured's default).
- ``interval_s`` (default 60, 1 to 3600): seconds between two questions while a batch waits.
- ``timeout_s`` (default 10, 1 to 120): seconds one question may take.
- ``max_wait_s`` (default null): the longest one batch waits, in seconds (0: never wait; at most
  :data:`MAX_WAIT_S`, 7 days: a run held longer than a week is better stopped and started again,
  and a larger number, ``.inf`` or ``1e12``, is not a time the control node's clock can add).
  Null: until the window closes or ``cuda13_until`` passes; a rollout with neither waits at most
  :data:`UNBOUNDED_WAIT_S`, so that no run waits for ever.
- ``on_unreachable`` (default ``refuse``): when Prometheus does not answer (or answers with an
  error, with something that is not HTTP, or with something that is not the rules API: a group,
  rule or alert that is not an object, ``rules`` or ``alerts`` not a list, ``labels`` not an
  object, an alert's ``state`` other than pending, firing or inactive), ``refuse`` starts no
  batch, naming the URL and what was wrong; ``proceed`` starts the batch without the check and
  says so.

What is asked: ``GET <url>/api/v1/rules?type=alert``, Prometheus's HTTP API "Rules" endpoint
(prometheus/prometheus ``docs/querying/api.md``): ``{"status": "success", "data": {"groups":
[{"name", "file", "rules": [{"name", "query", "labels", "annotations", "type": "alerting",
"alerts": [{"labels", "annotations", "state": "pending" | "firing", "activeAt", "value"}]}]}]}}``
(the states an alert has: ``pending``, ``firing``, ``inactive``; prometheus/prometheus
``rules/alerting.go``, ``AlertState``).
The rules API, not ``/api/v1/alerts``, because it gives each active alert its rule's ``query``.

The project's own alerts never count, whatever the filter: an alert whose rule's query reads a
metric of the project (a name starting with ``cuda13_upgrade_``, the prefix of every metric of
:mod:`cuda13_upgrade.metrics`, or a recording rule named after one, ``job:cuda13_upgrade_...``)
is left out (:func:`reads_own_metrics`). kured's README ("Prometheus Metrics") warns that its own
``RebootRequired`` alert, unless filtered out, blocks the very reboots it reports ("be sure to
specify ``--alert-filter-regexp=^RebootRequired$`` to avoid deadlock!"); an alert on
``cuda13_upgrade_hosts{state="rolled_back"}`` would hold every later batch of the rollout whose
rollback it reports (the failure budget, ``cuda13_max_failed_hosts``, decides that).

Errors of the option are ValueError (:class:`cuda13_upgrade.errors.Cuda13Error`), naming the
option, the key and the value (the URL masked).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.metrics import PREFIX
from cuda13_upgrade.numbers import finite_number
from cuda13_upgrade.redact import MASK, redact, redact_text, redact_userinfo

__all__ = [
    "API_PATH",
    "DEFAULTS",
    "MAX_WAIT_S",
    "OPTION",
    "OWN_PREFIX",
    "UNBOUNDED_WAIT_S",
    "AlertGate",
    "active_alerts",
    "ask",
    "describe",
    "describe_alert",
    "describe_alerts",
    "http_get",
    "parse",
    "reads_own_metrics",
    "sort_out",
]

#: The option's name.
OPTION = "cuda13_block_on_alerts"

#: The endpoint asked, below the server's URL (Prometheus HTTP API, "Rules").
API_PATH = "/api/v1/rules?type=alert"

#: The prefix of the project's own metric names (:data:`cuda13_upgrade.metrics.PREFIX`).
OWN_PREFIX = f"{PREFIX}_"

#: The keys' defaults (``url`` has none).
DEFAULTS: dict[str, Any] = {
    "match": None,
    "ignore": None,
    "firing_only": True,
    "interval_s": 60,
    "timeout_s": 10,
    "max_wait_s": None,
    "on_unreachable": "refuse",
}

#: Seconds a batch waits at most when neither ``max_wait_s``, the window nor ``cuda13_until``
#: ends the wait: an hour, then the run stops and a later run continues.
UNBOUNDED_WAIT_S = 3600

#: The longest ``max_wait_s``, in seconds: 7 days (see the module's docstring).
MAX_WAIT_S = 7 * 24 * 3600

#: The alert states of the rules API (Prometheus ``rules/alerting.go``, ``AlertState.String``).
STATES = ("pending", "firing", "inactive")

#: The most bytes of an answer read (a rules API answer of a large Prometheus is some MB).
MAX_ANSWER_BYTES = 64 * 1024 * 1024

_KEYS = ("url", *DEFAULTS)
_RANGES = {"interval_s": (1, 3600), "timeout_s": (1, 120)}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# PromQL string literals ("...", '...' with backslash escapes; `...` raw), left out before the
# metric names are looked for: a label value is not a metric read.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', re.DOTALL)
# A name that is, or a colon-separated part of which is, the project's (a metric, or a
# recording rule named level:metric:operations after one).
_OWN_NAME = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(OWN_PREFIX)}[A-Za-z0-9_:]*")
# {__name__="cuda13_upgrade_hosts"} or {__name__=~"cuda13_upgrade_.*"}: the name as a matcher.
_NAME_MATCHER = re.compile(r"__name__\s*=~?\s*[\"'`]\^?" + re.escape(OWN_PREFIX))


@dataclass(frozen=True)
class AlertGate:
    """A parsed ``cuda13_block_on_alerts``: see the module's docstring for each field."""

    url: str
    match: tuple[dict[str, re.Pattern[str]], ...] | None
    ignore: tuple[dict[str, re.Pattern[str]], ...] | None
    firing_only: bool
    interval_s: float
    timeout_s: float
    max_wait_s: float | None
    on_unreachable: str
    given: dict[str, Any]

    @property
    def display_url(self) -> str:
        """The server's URL as messages say it (credentials masked, whatever the password holds:
        :func:`cuda13_upgrade.redact.redact_userinfo`)."""
        return redact_userinfo(self.url)

    @property
    def rules_url(self) -> str:
        """The URL asked, without credentials (they go into a header, :meth:`headers`)."""
        parts = urlsplit(self.url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")) + API_PATH

    @property
    def display_rules_url(self) -> str:
        """:attr:`rules_url` with the masked credentials of :attr:`display_url`."""
        return self.display_url.rstrip("/") + API_PATH

    def headers(self) -> dict[str, str]:
        """The request's headers: ``Accept`` and, with credentials in the URL, basic authentication."""
        headers = {"Accept": "application/json"}
        parts = urlsplit(self.url)
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return headers

    def as_record(self) -> dict[str, Any]:
        """The option with its defaults filled in, credentials masked (for the plan and the report)."""
        return redact({OPTION: {**DEFAULTS, **self.given, "url": self.url}})[OPTION]

    def secrets(self) -> list[str]:
        """What an error's text must not quote: the password (as given and decoded, when longer
        than 3 characters), ``user:password`` and the ``Authorization`` header's value."""
        parts = urlsplit(self.url)
        if parts.username is None:
            return []
        found = {self.headers()["Authorization"].removeprefix("Basic ")}
        for secret in (parts.password or "", unquote(parts.password or "")):
            if len(secret) > 3:
                found.add(secret)
        found.add(f"{unquote(parts.username)}:{unquote(parts.password or '')}")
        return sorted((s for s in found if s and s != ":"), key=len, reverse=True)


def _error(problem: str, value: Any, remedy: str, option: str) -> Cuda13Error:
    # redact_userinfo: a password with a quote, a space or a "/" defeats redact_text's pattern.
    return Cuda13Error(f"{option} {problem}", redact_userinfo(value), option=option, remedy=remedy)


def _filter(value: Any, key: str, whole: Any, option: str) -> tuple[dict[str, re.Pattern[str]], ...] | None:
    """``match``/``ignore`` as a tuple of {label: compiled expression} (any one matches)."""
    if value in (None, "", [], {}):
        return None
    expected = (
        "a regular expression on alertname, a mapping of label names to regular expressions, or a "
        "list of these"
    )
    items = value if isinstance(value, list) else [value]
    out: list[dict[str, re.Pattern[str]]] = []
    for item in items:
        if isinstance(item, str):
            item = {"alertname": item}
        if not isinstance(item, Mapping) or not item:
            raise _error(
                f"{key} holds {item!r}, which is not a filter", whole, f"give {key} as {expected}", option
            )
        compiled: dict[str, re.Pattern[str]] = {}
        for label, expression in item.items():
            if not isinstance(label, str) or not _LABEL_NAME.match(label):
                raise _error(
                    f"{key} names {label!r}, which is not a label name",
                    whole,
                    "give label names of letters, digits and _ (e.g. alertname, severity)",
                    option,
                )
            if not isinstance(expression, str):
                raise _error(
                    f"{key} {label} is not a string",
                    whole,
                    f'give {key} {label} quoted: {label}: "..."',
                    option,
                )
            try:
                compiled[label] = re.compile(expression)
            except re.error as exc:
                raise _error(
                    f"{key} {label} is not a regular expression ({exc})",
                    whole,
                    "give a valid regular expression (it must match the whole value, as PromQL's =~)",
                    option,
                ) from exc
        out.append(compiled)
    return tuple(out)


def _number(value: Any, key: str, whole: Any, option: str, low: float, high: float | None) -> float:
    number = finite_number(value)
    upper = f" and <= {high:g}" if high is not None else ""
    if number is None or number < low or (high is not None and number > high):
        raise _error(
            f"{key} is not a number of seconds >= {low:g}{upper}",
            whole,
            f"give {key}: a number >= {low:g}{upper}",
            option,
        )
    return number


def _bool(value: Any, key: str, whole: Any, option: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise _error(f"{key} is not true or false", whole, f"give {key}: true or {key}: false", option)


def parse(value: Any, option: str = OPTION) -> AlertGate | None:
    """``cuda13_block_on_alerts`` as an :class:`AlertGate`, or None for no gate.

    Args:
        value: None, ``""`` or ``{}`` (no gate); a URL string; or the mapping of the module's
            docstring.
        option: the option named in an error.

    Raises:
        ValueError (:class:`cuda13_upgrade.errors.Cuda13Error`): not a mapping or URL, an
        unknown key, no ``url`` or one that is not an http(s) URL, a filter that is not one or
        whose expression does not compile, a number out of its range, ``on_unreachable`` other
        than refuse or proceed. The message names the option and the key; the value is shown
        with its credentials masked.
    """
    if value in (None, "", {}):
        return None
    if isinstance(value, str):
        value = {"url": value}
    expected = "{url: http://prometheus.example:9090, ignore: ..., match: ...}"
    if not isinstance(value, Mapping):
        raise _error("is not a mapping", value, f"give {expected}, or {{}} for no alert gate", option)
    unknown = sorted(str(k) for k in value if k not in _KEYS)
    if unknown:
        raise _error(f"has unknown keys {unknown}", value, f"give only {', '.join(_KEYS)}", option)
    url = value.get("url")
    if not isinstance(url, str) or not url.strip():
        raise _error(
            "has no url",
            value,
            "give url: the Prometheus server's URL, e.g. http://prometheus.example:9090",
            option,
        )
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed [ of an IPv6 address
        raise _error(
            f"url is not a URL ({exc})",
            value,
            "give the Prometheus server's URL, e.g. http://prometheus.example:9090 or http://[::1]:9090",
            option,
        ) from exc
    if parts.netloc.count("@") > 1:  # RFC 3986: userinfo holds no "@"; the mask would stop at the first
        masked = f"{parts.scheme}://***@{parts.netloc.rpartition('@')[2]}{parts.path}"
        raise _error(
            "url has an @ in its user or password",
            {**value, "url": masked},
            "give each @ of the user or password as %40 (percent-encoded)",
            option,
        )
    if "@" in parts.path + parts.query + parts.fragment:  # a "/", "?" or "#" ended the user's part early
        raise _error(
            "url has an @ after its host (a /, ? or # in its user or password ends them early)",
            value,
            "give each /, ?, # and @ of the user or password percent-encoded (%2F, %3F, %23, %40)",
            option,
        )
    if any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in url):
        raise _error(
            "url has whitespace or a control character",
            value,
            "give the Prometheus server's URL on one line, without spaces (write a space in it as %20)",
            option,
        )
    if not parts.path.isascii():  # http.client sends the request line in ASCII: every ask would fail
        raise _error(
            "url has a character that is not ASCII in its path",
            value,
            "give the path percent-encoded (e.g. é as %C3%A9)",
            option,
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise _error(
            "url is not an http:// or https:// URL",
            value,
            "give the Prometheus server's URL, e.g. http://prometheus.example:9090",
            option,
        )
    if parts.query or parts.fragment or url.rstrip("/").endswith("/api/v1/rules") or "/api/v1/" in parts.path:
        raise _error(
            "url is not the server's base URL",
            value,
            "give the URL Prometheus serves under (with --web.route-prefix's path if any), "
            "without /api/v1/..., query or fragment",
            option,
        )
    try:
        port = parts.port  # a port out of range raises here
    except ValueError as exc:
        raise _error("url has a bad port", value, "give a port 1-65535", option) from exc
    if port == 0:  # urllib accepts it; no server listens on it
        raise _error("url has a bad port", value, "give a port 1-65535", option)
    on_unreachable = value.get("on_unreachable", DEFAULTS["on_unreachable"])
    if on_unreachable not in ("refuse", "proceed"):
        raise _error(
            "on_unreachable is not refuse or proceed",
            value,
            "give on_unreachable: refuse (no batch starts while Prometheus does not answer) or proceed",
            option,
        )
    max_wait = value.get("max_wait_s", DEFAULTS["max_wait_s"])
    return AlertGate(
        url=url,
        match=_filter(value.get("match"), "match", value, option),
        ignore=_filter(value.get("ignore"), "ignore", value, option),
        firing_only=_bool(value.get("firing_only", DEFAULTS["firing_only"]), "firing_only", value, option),
        interval_s=_number(
            value.get("interval_s", DEFAULTS["interval_s"]),
            "interval_s",
            value,
            option,
            *_RANGES["interval_s"],
        ),
        timeout_s=_number(
            value.get("timeout_s", DEFAULTS["timeout_s"]), "timeout_s", value, option, *_RANGES["timeout_s"]
        ),
        max_wait_s=None
        if max_wait in (None, "")
        else _number(max_wait, "max_wait_s", value, option, 0, MAX_WAIT_S),
        on_unreachable=on_unreachable,
        given=dict(value),
    )


def reads_own_metrics(query: Any) -> bool:
    """Whether a rule's PromQL ``query`` reads one of the project's metrics.

    True when a metric name outside the query's string literals starts with
    :data:`OWN_PREFIX` (``cuda13_upgrade_hosts{state="rolled_back"} > 0``,
    ``absent(cuda13_upgrade_run_info)``), when a colon-separated part of one does
    (``job:cuda13_upgrade_hosts:sum``, a recording rule named after it), or when a
    ``__name__`` matcher names one (``{__name__=~"cuda13_upgrade_.+"}``). A label value
    that merely contains the prefix (``up{job="cuda13_upgrade_textfile"}``) is not a read.
    """
    text = str(query or "")
    if _NAME_MATCHER.search(text):
        return True
    return bool(_OWN_NAME.search(_STRINGS.sub('""', text)))


def _stamp(text: Any) -> str:
    """Prometheus's ``activeAt`` (RFC 3339, nanoseconds, any offset) as ``YYYY-MM-DDTHH:MM:SSZ``;
    the text as given when it is not a time."""
    raw = str(text or "")
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", raw.replace("Z", "+00:00"))
    try:
        stamp = datetime.fromisoformat(trimmed)
    except ValueError:
        return raw
    if stamp.tzinfo is None:
        return raw
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _listed(value: Any, what: str) -> list[Any]:
    """``value`` when a list; ``[]`` when null or missing (the rules API writes an empty list);
    else ValueError naming ``what``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"the answer's {what} not a list but {type(value).__name__}")
    return value


def active_alerts(answer: Any) -> list[dict[str, Any]]:
    """The active alerts of a rules API answer (``data.groups[].rules[].alerts[]``), each
    ``{"alertname", "labels", "state", "active_at", "rule", "query", "group"}`` (``active_at``
    in UTC, ``YYYY-MM-DDTHH:MM:SSZ``). Recording rules and rules without alerts give none.

    Raises ValueError when ``answer`` is not a successful rules API answer (``status`` not
    ``success``, or no ``data.groups`` list), with Prometheus's ``errorType``/``error`` when it
    gave them, and when any part of it is not of the API's shape, naming the part: a group,
    rule or alert that is not an object, ``rules`` or ``alerts`` that is not a list (``null``
    reads as none), ``labels`` that is not an object of strings, a ``state`` other than
    :data:`STATES` (e.g. ``the answer's rule GpuNodeHot has alerts that are not a list but
    dict``). A malformed answer never reads as "no alert".
    """
    if not isinstance(answer, Mapping):
        raise ValueError(f"the answer is not a JSON object but {type(answer).__name__}")
    if answer.get("status") != "success":
        said = ": ".join(str(answer[k]) for k in ("errorType", "error") if answer.get(k))
        raise ValueError(
            f"Prometheus answered status {answer.get('status')!r}" + (f" ({said})" if said else "")
        )
    groups = (answer.get("data") or {}).get("groups") if isinstance(answer.get("data"), Mapping) else None
    if not isinstance(groups, list):
        raise ValueError("the answer has no data.groups list (is the URL Prometheus's?)")
    found: list[dict[str, Any]] = []
    for g, group in enumerate(groups, 1):
        if not isinstance(group, Mapping):
            raise ValueError(f"the answer's group {g} is not an object but {type(group).__name__}")
        group_name = str(group.get("name") or g)
        for r, rule in enumerate(_listed(group.get("rules"), f"group {group_name} has rules that are"), 1):
            if not isinstance(rule, Mapping):
                raise ValueError(
                    f"the answer's group {group_name} has a rule ({r}) that is not an object "
                    f"but {type(rule).__name__}"
                )
            rule_name = str(rule.get("name") or f"{r} of group {group_name}")
            if rule.get("type", "alerting") != "alerting":
                continue  # a recording rule (asked with type=alert, Prometheus leaves them out)
            for alert in _listed(rule.get("alerts"), f"rule {rule_name} has alerts that are"):
                if not isinstance(alert, Mapping):
                    raise ValueError(
                        f"the answer's rule {rule_name} has an alert that is not an object "
                        f"but {type(alert).__name__}"
                    )
                given = alert.get("labels")
                if given is None:
                    given = {}
                if not isinstance(given, Mapping):
                    raise ValueError(
                        f"the answer's rule {rule_name} has an alert whose labels are not an object "
                        f"but {type(given).__name__}"
                    )
                state = alert.get("state")
                if state not in STATES:
                    raise ValueError(
                        f"the answer's rule {rule_name} has an alert whose state is {state!r}, "
                        f"not {', '.join(STATES[:-1])} or {STATES[-1]}"
                    )
                labels = {str(k): str(v) for k, v in given.items()}
                found.append(
                    {
                        "alertname": labels.get("alertname") or str(rule.get("name") or ""),
                        "labels": labels,
                        "state": state,
                        "active_at": _stamp(alert.get("activeAt")),
                        "rule": str(rule.get("name") or ""),
                        "query": str(rule.get("query") or ""),
                        "group": str(group.get("name") or ""),
                    }
                )
    return found


def _matches(alert: Mapping[str, Any], the_filter: Sequence[Mapping[str, re.Pattern[str]]]) -> bool:
    labels = alert.get("labels") or {}
    return any(
        all(expression.fullmatch(str(labels.get(label, ""))) for label, expression in item.items())
        for item in the_filter
    )


def sort_out(alerts: Sequence[Mapping[str, Any]], gate: AlertGate) -> dict[str, list[dict[str, Any]]]:
    """The alerts in four lists, each alert in the first that takes it:

    ``own`` (its rule reads the project's metrics, :func:`reads_own_metrics`), ``pending``
    (pending while ``firing_only``), ``left_out`` (not matched by ``match``, or matched by
    ``ignore``) and ``blocking`` (the rest: these hold a batch).
    """
    out: dict[str, list[dict[str, Any]]] = {"own": [], "pending": [], "left_out": [], "blocking": []}
    for alert in alerts:
        alert = dict(alert)
        if alert.get("state") not in ("firing", "pending"):
            continue  # the rules API lists active alerts only; an inactive one holds nothing
        if reads_own_metrics(alert.get("query")):
            out["own"].append(alert)
        elif gate.firing_only and alert["state"] != "firing":
            out["pending"].append(alert)
        elif (gate.match is not None and not _matches(alert, gate.match)) or (
            gate.ignore is not None and _matches(alert, gate.ignore)
        ):
            out["left_out"].append(alert)
        else:
            out["blocking"].append(alert)
    return out


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _SameOriginAuthorization(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, but the ``Authorization`` header only to the URL's own scheme, host and
    port: urllib copies every header but the body's into the redirected request, so a Prometheus
    (or a proxy before it) that redirects to another host would be sent the password."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # urllib's signature
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_SameOriginAuthorization)


def http_get(url: str, headers: Mapping[str, str], timeout_s: float) -> bytes:
    """GET ``url`` (urllib, the environment's proxy settings) and return the body, all within
    ``timeout_s`` (the name's lookup, the connection, a body sent a byte at a time); a redirect to
    another scheme, host or port is followed without the ``Authorization`` header.

    Raises OSError (``urllib.error.URLError``, ``HTTPError`` for a status other than 2xx,
    ``TimeoutError`` when the whole answer took longer than ``timeout_s``) when there is no
    answer, ``http.client.HTTPException`` (``BadStatusLine``) when the answer is not HTTP,
    ValueError when it is larger than :data:`MAX_ANSWER_BYTES`.
    """
    deadline = time.monotonic() + timeout_s
    box: dict[str, Any] = {}

    def get() -> None:
        try:
            request = urllib.request.Request(url, headers=dict(headers), method="GET")
            with _OPENER.open(request, timeout=timeout_s) as response:  # http(s) only (parse)
                chunks: list[bytes] = []
                size = 0
                while time.monotonic() < deadline:
                    chunk = response.read1(65536)  # at most one read of the socket
                    if not chunk:
                        box["body"] = b"".join(chunks)
                        return
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise ValueError(f"the answer is larger than {MAX_ANSWER_BYTES // 2**20} MiB")
                raise TimeoutError("timed out")
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=get, name="cuda13-alerts-get", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():  # a slow name lookup or a trickling body: the read ends by the deadline
        raise TimeoutError("timed out")
    if "error" in box:
        raise box["error"]
    return box["body"]


def _http_error_text(exc: urllib.error.HTTPError) -> str:
    text = " ".join(f"HTTP {exc.code} {exc.reason}".split())  # urllib's redirect loop: three lines
    try:
        body = json.loads(exc.read(65536) or b"null")
    except (OSError, ValueError):
        body = None
    if isinstance(body, Mapping) and (body.get("error") or body.get("errorType")):
        said = ": ".join(str(body[k]) for k in ("errorType", "error") if body.get(k))
        text += f" ({said})"
    return text


def _error_text(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return _http_error_text(exc)
    if isinstance(exc, http.client.BadStatusLine) and not isinstance(exc, ConnectionError):
        # Not HTTP at all, e.g. an ssh port's greeting "SSH-2.0-OpenSSH_9.2\r\n" (RFC 4253, 4.2).
        return redact_text(f"the answer is not HTTP (it begins {str(exc.line)[:80]!r})")
    if isinstance(exc, http.client.HTTPException) and not isinstance(exc, OSError):
        return redact_text(f"the answer is not valid HTTP ({type(exc).__name__}: {exc})")
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout_s:g} s (timeout_s)"
    return redact_text(str(reason) or type(reason).__name__)


Fetch = Callable[[str, Mapping[str, str], float], bytes]


def ask(gate: AlertGate, fetch: Fetch | None = None) -> dict[str, Any]:
    """Ask Prometheus for its active alerts and sort them (:func:`sort_out`).

    Args:
        gate: the parsed option.
        fetch: ``fetch(url, headers, timeout_s) -> body bytes``, raising OSError when there
            is no answer (``http.client.HTTPException`` when the answer is not HTTP); default
            :func:`http_get`.

    Returns:
        ``{"reachable": bool, "error": str, "url": the masked URL asked, "own", "pending",
        "left_out", "blocking": [alert]}``; ``error`` (``""`` when reachable) names what
        failed: the connection's error, ``HTTP <code> <reason>`` (with Prometheus's error), no
        answer within ``timeout_s``, an answer that is not HTTP, not JSON or not the rules
        API's (:func:`active_alerts`). Never raises for what the server answers.
    """
    fetch = fetch or http_get
    empty: dict[str, list[dict[str, Any]]] = {"own": [], "pending": [], "left_out": [], "blocking": []}
    base = {"url": gate.display_rules_url, **empty}
    try:
        body = fetch(gate.rules_url, gate.headers(), gate.timeout_s)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # What the server said may quote the request's credentials (a proxy's echo of the header).
        error = _error_text(exc, gate.timeout_s)
        for secret in gate.secrets():
            error = error.replace(secret, MASK)
        return {**base, "reachable": False, "error": redact_text(error)}
    try:
        answer = json.loads(body)
    except RecursionError:
        return {**base, "reachable": False, "error": "the answer is nested too deeply to be the rules API's"}
    except ValueError:
        return {**base, "reachable": False, "error": "the answer is not JSON (is the URL Prometheus's?)"}
    try:
        alerts = active_alerts(answer)
    except ValueError as exc:
        return {**base, "reachable": False, "error": str(exc)}
    return {**base, "reachable": True, "error": "", **sort_out(alerts, gate)}


def describe_alert(alert: Mapping[str, Any]) -> str:
    """``GpuNodeHot{instance="gpu-node-01", severity="page"} firing since 2026-12-06T07:36:53Z``:
    the name, the other labels (sorted, PromQL's form) and the state since ``activeAt``."""
    labels = {k: v for k, v in (alert.get("labels") or {}).items() if k != "alertname"}
    # A value as a PromQL string literal (quotes, backslashes and line breaks escaped): a label
    # value with a line break would otherwise split the line it is printed in.
    inner = ", ".join(f"{k}={json.dumps(str(v), ensure_ascii=False)}" for k, v in sorted(labels.items()))
    name = json.dumps(str(alert.get("alertname")), ensure_ascii=False)[1:-1]
    return f"{name}{{{inner}}} {alert.get('state')} since {alert.get('active_at')}"


def describe_alerts(alerts: Sequence[Mapping[str, Any]], most: int = 5) -> str:
    """The first ``most`` alerts (:func:`describe_alert`), ``"; "``-separated, and how many more."""
    shown = "; ".join(describe_alert(a) for a in alerts[:most])
    if len(alerts) > most:
        shown += f"; and {len(alerts) - most} more"
    return shown


def _filter_text(the_filter: tuple[dict[str, re.Pattern[str]], ...]) -> str:
    return " or ".join(
        "{" + ", ".join(f'{label}=~"{expression.pattern}"' for label, expression in item.items()) + "}"
        for item in the_filter
    )


def describe(gate: AlertGate, bounded: bool = True) -> str:
    """The plan's line of the gate (the URL masked), e.g. ``batches wait while Prometheus at
    http://prometheus.example:9090 has firing alerts (cuda13_block_on_alerts: ...)``.
    ``bounded``: the rollout has a window or ``cuda13_until`` (which end a wait)."""
    which = "firing alerts" if gate.firing_only else "firing or pending alerts"
    parts = []
    if gate.match:
        parts.append(f"only those matching {_filter_text(gate.match)}")
    if gate.ignore:
        parts.append(f"not those matching {_filter_text(gate.ignore)}")
    parts.append(f"never those whose rule reads a {OWN_PREFIX}* metric")
    parts.append(f"asked every {gate.interval_s:g} s")
    if gate.max_wait_s is not None:
        parts.append(f"a batch waits at most {gate.max_wait_s:g} s")
    elif bounded:
        parts.append("a batch waits until the window closes or cuda13_until passes")
    else:
        parts.append(f"a batch waits at most {UNBOUNDED_WAIT_S} s (no window, no cuda13_until)")
    parts.append(
        "no batch starts while it does not answer"
        if gate.on_unreachable == "refuse"
        else "a batch starts without the check while it does not answer"
    )
    return f"batches wait while Prometheus at {gate.display_url} has {which} ({OPTION}: {'; '.join(parts)})"
