"""Notifications of the rollout: webhooks told what happened, at the run's start, each batch's end,
each rollback, each stop and the run's end.

After kured's ``--notify-url`` (github.com/kubereboot/kured: a message at each drain and reboot) and
Argo Rollouts' notifications on each phase. The gates on the control node send them
(:mod:`cuda13_upgrade.steps.fleet`); this module builds the bodies (pure functions), posts them
(:func:`send_all`, never raising, bounded in time) and keeps the run's record of what was sent
(``<run dir>/notifications.json``, :func:`summary_lines` for ``summary.md``).

The option ``cuda13_notify`` (one value for every host of the rollout): ``{}`` (none), a list of
targets, or a mapping of

- ``targets``: a list of ``{url, format}`` (or one such mapping): ``url`` the webhook's
  ``http://`` or ``https://`` URL, ``format`` ``slack`` (Slack's incoming webhook: ``{"text":
  "..."}``, the text's ``&``, ``<`` and ``>`` written ``&amp;``, ``&lt;``, ``&gt;`` as Slack's
  "Formatting text" reference, "Escaping text", asks) or ``json`` (the event's record:
  :func:`json_body`);
- ``timeout_s`` (default 5, 1 to 60): the longest one send to all targets may take, in seconds.

A webhook's URL is its key (Slack: ``https://hooks.slack.com/services/T.../B.../...``): every
record, message and report shows it as ``scheme://host[:port]/***``
(:func:`cuda13_upgrade.redact.redact_url`), and the options' record (``cuda13_options``) and the
plan (``cuda13_fleet``) hold it masked; the gates read the option itself from the inventory.

Events (``event`` of each body): ``start``, ``batch_end``, ``rollback`` (a host rolled back, failed
or lost, with its reason), ``breaker`` (the run refused before any change), ``budget_spent``,
``window_closed``, ``alerts_held``, ``prometheus_unreachable`` (the batches not started and why)
and ``end``. The generic body (``json``)::

    {"event": "batch_end", "run_id": "20261205T220000Z", "at": "2026-12-05T22:41:09Z",
     "text": "cuda13-upgrade run 20261205T220000Z: batch 2 of 5 ended: ...",
     ...the event's fields...,
     "summary": {"hosts": 8, "kept": 2, "rolled_back": 1, "pending": 5}}

``summary`` counts the hosts of the run by status so far (``pending``: no result yet).

A send that fails (no answer within ``timeout_s``, a refused connection, an HTTP error) is a
record, never an error: the rollout goes on, and the record is kept in ``notifications.json``
and shown in the summary.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from cuda13_upgrade import reportfiles
from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.hostresult import STATUS_TEXT, failure_message
from cuda13_upgrade.numbers import finite_number
from cuda13_upgrade.redact import MASK, redact, redact_text, redact_url, redact_urls

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "EVENTS",
    "FILE",
    "FORMATS",
    "OPTION",
    "Notify",
    "Target",
    "batch_end_event",
    "body",
    "breaker_event",
    "counts",
    "describe",
    "end_event",
    "http_post",
    "json_body",
    "load_state",
    "parse",
    "record_sends",
    "rollback_event",
    "run_record",
    "save_state",
    "send_all",
    "slack_body",
    "slack_escape",
    "start_event",
    "stop_event",
    "summary_lines",
]

#: The option's name.
OPTION = "cuda13_notify"

#: The body formats: Slack's incoming webhook, or the event's record as JSON.
FORMATS = ("slack", "json")

#: ``timeout_s`` when not given, and its range.
DEFAULT_TIMEOUT_S = 5.0
TIMEOUT_RANGE = (1.0, 60.0)

#: The events, in the order a run may send them.
EVENTS = (
    "start",
    "breaker",
    "batch_end",
    "rollback",
    "budget_spent",
    "window_closed",
    "alerts_held",
    "prometheus_unreachable",
    "end",
)

#: The run's record of its notifications, in the run's report directory.
FILE = "notifications.json"

#: The statuses a ``rollback`` event is sent for (those the failure budget counts).
NOT_KEPT = ("rolled_back", "failed", "unreachable", "interrupted")

#: Hosts a text names at most (the JSON body lists them all).
MOST_HOSTS = 10

#: Characters of a text at most (Slack truncates a message's text past 40,000).
MAX_TEXT = 4000

#: The request's headers (Slack: ``Content-type: application/json``).
HEADERS = {"Content-Type": "application/json", "User-Agent": "cuda13-upgrade"}

_KEYS = ("targets", "timeout_s")
_TARGET_KEYS = ("url", "format")


@dataclass(frozen=True)
class Target:
    """One webhook: its URL (a secret) and its body's format."""

    url: str
    format: str

    @property
    def display_url(self) -> str:
        """The URL as records show it (``scheme://host[:port]/***``)."""
        return redact_url(self.url)

    def as_record(self) -> dict[str, str]:
        return {"url": self.display_url, "format": self.format}


@dataclass(frozen=True)
class Notify:
    """A parsed ``cuda13_notify``."""

    targets: tuple[Target, ...]
    timeout_s: float

    def as_record(self) -> dict[str, Any]:
        """The option with its default, the URLs masked (for the plan and the reports)."""
        return {"targets": [t.as_record() for t in self.targets], "timeout_s": self.timeout_s}


# --- the option --------------------------------------------------------------------------------


def _error(problem: str, value: Any, remedy: str, option: str) -> Cuda13Error:
    return Cuda13Error(f"{option} {problem}", redact_urls(value), option=option, remedy=remedy)


_EXPECTED = "{targets: [{url: https://hooks.slack.com/services/..., format: slack}], timeout_s: 5}"


def _target(item: Any, where: str, whole: Any, option: str) -> Target:
    if isinstance(item, str):
        raise _error(
            f"{where} is a URL without a format",
            whole,
            f"give {where} as {{url: ..., format: slack}} or {{url: ..., format: json}}",
            option,
        )
    if not isinstance(item, Mapping):
        raise _error(f"{where} is not a mapping", whole, f"give {where} as {{url: ..., format: ...}}", option)
    unknown = sorted(str(k) for k in item if k not in _TARGET_KEYS)
    if unknown:
        raise _error(
            f"{where} has unknown keys {unknown}", whole, f"give only {', '.join(_TARGET_KEYS)}", option
        )
    url = item.get("url")
    if not isinstance(url, str) or not url.strip():
        raise _error(f"{where} has no url", whole, f"give {where} url: the webhook's URL", option)
    url = url.strip()
    if any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in url):
        raise _error(
            f"{where} url {redact_url(url)!r} has whitespace or a control character",
            whole,
            "give the webhook's URL on one line, without spaces (write a space in it as %20)",
            option,
        )
    try:
        parts = urlsplit(url)
        if parts.port == 0:  # urllib accepts it; no server listens on it
            raise ValueError("Port out of range 1-65535")
    except ValueError as exc:
        raise _error(
            # the error's own text may quote a part of the password (urllib.parse: "Port could not be
            # cast to integer value as ..."): left out
            f"{where} url {redact_url(url)!r} cannot be read (its port, or an @ or / in its user or"
            " password)",
            whole,
            "give the webhook's http:// or https:// URL with a port 1-65535 and any @ or / in its"
            " user or password written as %40 or %2F",
            option,
        ) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise _error(
            f"{where} url {redact_url(url)!r} is not an http:// or https:// URL",
            whole,
            "give the webhook's http:// or https:// URL",
            option,
        )
    if parts.netloc.count("@") > 1:
        raise _error(f"{where} url has an @ in its user or password", whole, "write it as %40", option)
    if not (parts.path + parts.query).isascii():  # http.client sends the request line in ASCII
        raise _error(
            f"{where} url {redact_url(url)!r} has a character that is not ASCII in its path or query",
            whole,
            "give the webhook's URL with its path and query percent-encoded (e.g. é as %C3%A9)",
            option,
        )
    fmt = item.get("format")
    if fmt not in FORMATS:
        raise _error(
            f"{where} format {fmt!r} is not slack or json",
            whole,
            "give format: slack (Slack's incoming webhook) or format: json (the event's record)",
            option,
        )
    return Target(url=url, format=str(fmt))


def _timeout(value: Any, whole: Any, option: str) -> float:
    low, high = TIMEOUT_RANGE
    number = finite_number(value)
    if number is None or not low <= number <= high:
        raise _error(
            f"timeout_s {value!r} is not a number of seconds >= {low:g} and <= {high:g}",
            whole,
            f"give timeout_s: a number from {low:g} to {high:g}",
            option,
        )
    return number


def parse(value: Any, option: str = OPTION) -> Notify | None:
    """``cuda13_notify`` as a :class:`Notify`, or None for no notifications.

    Args:
        value: None, ``""``, ``{}``, ``[]`` or ``{targets: []}`` (none); a list of targets; or the
            mapping of the module's docstring.
        option: the option named in an error.

    Raises:
        ValueError (:class:`cuda13_upgrade.errors.Cuda13Error`): not a mapping or list, an unknown
        key, a target without url or format, a url that is not http(s), a format other than slack
        or json, a timeout_s out of range. The message names the option, the key (``targets[1]
        format``) and the bad value; the option's value is shown with its URLs masked.
    """
    if value in (None, "", {}, []):
        return None
    if isinstance(value, list | tuple):
        value = {"targets": list(value)}
    if not isinstance(value, Mapping):
        raise _error("is not a mapping or a list", value, f"give {_EXPECTED}, or {{}} for none", option)
    unknown = sorted(str(k) for k in value if k not in _KEYS)
    if unknown:
        raise _error(f"has unknown keys {unknown}", value, f"give only {', '.join(_KEYS)}", option)
    targets = value.get("targets")
    if isinstance(targets, Mapping):
        targets = [targets]
    if targets in (None, "", []):
        return None
    if not isinstance(targets, list | tuple):
        raise _error("targets is not a list", value, f"give {_EXPECTED}", option)
    parsed = tuple(_target(item, f"targets[{i}]", value, option) for i, item in enumerate(targets))
    timeout = value.get("timeout_s", DEFAULT_TIMEOUT_S)
    return Notify(targets=parsed, timeout_s=_timeout(timeout, value, option))


def describe(setting: Notify) -> str:
    """The plan's line: ``notifications go to https://hooks.slack.com/*** (slack); each send waits
    at most 5 s (cuda13_notify timeout_s)``."""
    where = ", ".join(f"{t.display_url} ({t.format})" for t in setting.targets)
    return (
        f"notifications go to {where}; each send waits at most {setting.timeout_s:g} s ({OPTION} timeout_s)"
    )


# --- the events (pure) ---------------------------------------------------------------------------


def _key(status: Any) -> str:
    return "pending" if status in (None, "") else str(status).replace(" ", "_")


def counts(statuses: Mapping[str, Any]) -> dict[str, int]:
    """The hosts by status: ``{"hosts": n, "<status>": n, ...}`` (``rolled_back``, ``not_reached``,
    ``already_kept``: spaces become ``_``; a host without a status is ``pending``)."""
    out: dict[str, int] = {"hosts": len(statuses)}
    for status in statuses.values():
        out[_key(status)] = out.get(_key(status), 0) + 1
    return out


def _counts_text(summary: Mapping[str, int], pending: str = "to go") -> str:
    parts = []
    for key, number in summary.items():
        if key == "hosts" or not number:
            continue
        said = pending if key == "pending" else STATUS_TEXT.get(key, key.replace("_", " "))
        parts.append(f"{number} {said}")
    return ", ".join(parts) or "no hosts"


def _hosts_text(hosts: Sequence[str]) -> str:
    shown = ", ".join(hosts[:MOST_HOSTS])
    return shown + (f" and {len(hosts) - MOST_HOSTS} more" if len(hosts) > MOST_HOSTS else "")


def _event(name: str, run_id: str, at: str, text: str, summary: Mapping[str, int], **fields: Any) -> dict:
    text = redact_text(text)  # before the cut: a URL cut in two would not be recognised
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 1] + "…"
    return redact(
        {"event": name, "run_id": run_id, "at": at, "text": text, **fields, "summary": dict(summary)}
    )


def start_event(
    run_id: str, plan: Mapping[str, Any], *, at: str, estimated_end: str | None = None
) -> dict[str, Any]:
    """The run's start: the plan's one-line summary (hosts and batches, window, ``cuda13_until``,
    failure budget, alert gate). ``plan``: :func:`cuda13_upgrade.steps.fleet.plan`'s record.
    ``estimated_end``: the run's estimated end (ISO 8601), told when the plan has one (the text's
    ``estimated end ...`` and the field ``estimated_end``); None leaves both out."""
    hosts = [h for batch in plan.get("batches") or [] for h in batch]
    heading = str((plan.get("lines") or [f"{len(hosts)} hosts"])[0]).rstrip(":")
    parts = [heading]
    if plan.get("window_text"):
        parts.append(f"window {plan['window_text']}")
    if plan.get("until_at"):
        parts.append(f"no batch starts after {plan['until_at']}")
    parts.append(f"failure budget {plan.get('max_failed_hosts', 0)} host(s)")
    gate = plan.get("alerts") or {}
    if gate.get("url"):
        parts.append(f"batches wait while Prometheus at {gate['url']} has matching alerts")
    fields: dict[str, Any] = {
        "hosts": hosts,
        "batches": [len(b) for b in plan.get("batches") or []],
        "window": plan.get("window_text") or "",
        "until": plan.get("until_at") or "",
        "max_failed_hosts": plan.get("max_failed_hosts", 0),
    }
    if estimated_end:
        parts.append(f"estimated end {estimated_end}")
        fields["estimated_end"] = estimated_end
    text = f"cuda13-upgrade run {run_id} started: " + "; ".join(parts)
    return _event("start", run_id, at, text, {"hosts": len(hosts), "pending": len(hosts)}, **fields)


def batch_end_event(
    run_id: str,
    number: int,
    of: int | None,
    outcomes: Mapping[str, Any],
    statuses: Mapping[str, Any],
    *,
    at: str,
) -> dict[str, Any]:
    """A batch's end: ``outcomes`` its hosts' statuses (``{host: "kept" | "rolled_back" | ...}``),
    ``statuses`` every host's so far (None: no result yet). ``of``: the plan's batch count, or None.
    Fields: ``batch``, ``of``, ``hosts``, ``outcomes`` and this batch's ``kept``, ``rolled_back``,
    ``failed`` (failed or lost)."""
    hosts = list(outcomes)
    said = [f"{h} {STATUS_TEXT.get(str(s), str(s))}" for h, s in outcomes.items()]
    shown = ", ".join(said[:MOST_HOSTS]) + (
        f" and {len(said) - MOST_HOSTS} more" if len(said) > MOST_HOSTS else ""
    )
    summary = counts(statuses)
    label = f"batch {number} of {of}" if of else f"batch {number}"
    text = f"cuda13-upgrade run {run_id}: {label} ended: {shown}; so far {_counts_text(summary)}"
    kept = sum(1 for s in outcomes.values() if s == "kept")
    rolled = sum(1 for s in outcomes.values() if s == "rolled_back")
    return _event(
        "batch_end",
        run_id,
        at,
        text,
        summary,
        batch=number,
        of=of,
        hosts=hosts,
        outcomes={h: s for h, s in outcomes.items()},
        kept=kept,
        rolled_back=rolled,
        failed=len(hosts) - kept - rolled,
    )


def rollback_event(
    run_id: str, result: Mapping[str, Any], statuses: Mapping[str, Any], *, at: str
) -> dict[str, Any]:
    """A host that did not keep the upgrade (rolled back, failed, lost), with its reason:
    ``result`` its record (``result.json``, :func:`cuda13_upgrade.hostresult.host_result`; at least
    ``{"host", "status"}``). Fields: ``host``, ``status``, ``step``, ``reason`` (and ``cause``,
    ``remedy`` of a known diagnosis). Text: :func:`cuda13_upgrade.hostresult.failure_message`."""
    reason = str(result.get("reason") or result.get("error") or "")
    fields: dict[str, Any] = {
        "host": result.get("host"),
        "status": result.get("status"),
        "step": result.get("failed_step") or "",
        "reason": reason,
    }
    diagnosis = result.get("diagnosis") or {}
    if isinstance(diagnosis, Mapping) and diagnosis.get("cause"):
        fields.update(cause=diagnosis.get("cause"), remedy=diagnosis.get("remedy"))
    message = failure_message(result if reason else {**result, "reason": "no reason recorded"})
    text = f"cuda13-upgrade run {run_id}: {message}"
    return _event("rollback", run_id, at, text, counts(statuses), **fields)


def breaker_event(run_id: str, not_started: Mapping[str, Any], *, at: str) -> dict[str, Any]:
    """The run refused before any change by the breaker across runs: ``not_started`` is the
    refused run's record (``{"said", "reason", "hosts"}``)."""
    hosts = list(not_started.get("hosts") or [])
    text = (
        f"cuda13-upgrade run {run_id} refused, no host was changed: {not_started.get('reason')} "
        f"({len(hosts)} host(s) not started: {_hosts_text(hosts)})"
    )
    summary = {"hosts": len(hosts), "not_started": len(hosts)}
    return _event("breaker", run_id, at, text, summary, reason=not_started.get("reason"), hosts_left=hosts)


def stop_event(
    run_id: str, kind: str, not_started: Mapping[str, Any], statuses: Mapping[str, Any], *, at: str
) -> dict[str, Any]:
    """The batches a gate did not start: ``kind`` is ``budget_spent``, ``window_closed``,
    ``alerts_held`` or ``prometheus_unreachable``; ``not_started`` the gate's record (``{"said",
    "reason", "hosts"}`` and ``failed``, ``opens_at``, ``alerts``, ``error`` when it has them).
    Fields: ``said``, ``reason``, ``hosts_left`` and those the record has (``alerts`` as
    ``{"alertname", "labels", "state", "active_at"}``)."""
    hosts = list(not_started.get("hosts") or [])
    said = str(not_started.get("said") or "not reached")
    text = (
        f"cuda13-upgrade run {run_id} stopped: {not_started.get('reason')}; {len(hosts)} host(s) {said}: "
        f"{_hosts_text(hosts)}"
    )
    fields: dict[str, Any] = {"said": said, "reason": not_started.get("reason"), "hosts_left": hosts}
    for key in ("failed", "opens_at", "error"):
        if not_started.get(key):
            fields[key] = not_started[key]
    if not_started.get("alerts"):
        fields["alerts"] = [
            {k: a.get(k) for k in ("alertname", "labels", "state", "active_at")}
            for a in not_started["alerts"]
        ]
    return _event(kind, run_id, at, text, counts(statuses), **fields)


def end_event(run_id: str, statuses: Mapping[str, Any], report: str, *, at: str) -> dict[str, Any]:
    """The run's end: ``statuses`` every host of the run's (the summary's rows: ``kept``,
    ``rolled_back``, ``not reached`` ...), ``report`` the summary's path on the control node.
    Fields: ``report``."""
    summary = counts(statuses)
    text = (
        f"cuda13-upgrade run {run_id} ended: {_counts_text(summary, 'without a result')} "
        f"({summary['hosts']} host(s)); report: {report}"
    )
    return _event("end", run_id, at, text, summary, report=report)


def slack_escape(text: str) -> str:
    """``text`` with Slack's control characters ``&``, ``<`` and ``>`` written as the HTML entities
    ``&amp;``, ``&lt;``, ``&gt;`` (Slack's "Formatting text" reference, "Escaping text":
    api.slack.com/reference/surfaces/formatting#escaping); nothing else is encoded."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(event: Mapping[str, Any]) -> dict[str, str]:
    """Slack's incoming webhook body, ``{"text": "..."}`` (the event's text, escaped); Slack's
    example: ``curl -X POST -H 'Content-type: application/json' -d '{"text":"Hello, World!"}'
    https://hooks.slack.com/services/T1234567/AAAAAAAA/ZZZZZZ`` (docs.slack.dev, "Incoming
    webhooks")."""
    return {"text": slack_escape(redact_text(str(event.get("text") or "")))}


def json_body(event: Mapping[str, Any]) -> dict[str, Any]:
    """The generic body: the event's record as it is, ``{"event", "run_id", "at", "text", ...its
    fields..., "summary": {...counts}}``, every string in it redacted
    (:func:`cuda13_upgrade.redact.redact`)."""
    return redact(dict(event))


def body(event: Mapping[str, Any], fmt: str) -> bytes:
    """The request's body for ``fmt`` (``slack`` or ``json``), UTF-8 JSON."""
    document = slack_body(event) if fmt == "slack" else json_body(event)
    return json.dumps(document, ensure_ascii=False, default=str).encode("utf-8")


# --- sending -----------------------------------------------------------------------------------

#: ``post(url, body, headers, timeout_s) -> HTTP status``; raises OSError (``urllib.error``'s
#: ``URLError``, ``HTTPError`` for a status other than 2xx, ``TimeoutError``) when not sent.
Post = Callable[[str, bytes, Mapping[str, str], float], int]


def _clean(url: str) -> str:
    """The URL :func:`http_post` requests: its userinfo and fragment left out."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error (``HTTPError`` with its 3xx status): urllib would follow a 301, 302 or
    303 to a POST as a GET without the body, to any host and with the ``Authorization`` header,
    and the message, never delivered, would read as sent."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # urllib's signature
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def http_post(url: str, data: bytes, headers: Mapping[str, str], timeout_s: float) -> int:
    """POST ``data`` to ``url`` (urllib, the environment's proxy settings); a ``user:password@`` in
    the URL is sent as HTTP basic authentication. Returns the HTTP status (2xx). Raises OSError when
    there is no answer or it is not 2xx (``HTTPError``; a redirect is not followed: its 3xx)."""
    parts = urlsplit(url)
    headers = dict(headers)
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    request = urllib.request.Request(_clean(url), data=data, headers=headers, method="POST")
    with _OPENER.open(request, timeout=timeout_s) as response:  # http(s) only (parse)
        response.read(65536)
        return int(response.status)


def _secrets(urls: Sequence[str]) -> list[tuple[str, str]]:
    """Each URL's forms an error text may quote (as given, as requested by :func:`http_post`,
    its path and query; each also as ``repr`` writes it) with what replaces them, longest
    first."""
    pairs: dict[str, str] = {}
    for url in urls:
        shown = redact_url(url)
        forms = [url, url.strip()]
        try:
            parts = urlsplit(url.strip())
            forms.append(_clean(url.strip()))
            if parts.username is not None:  # http_post's basic authentication, as a server may echo it
                password = unquote(parts.password or "")
                pair = f"{unquote(parts.username)}:{password}"
                pairs.setdefault(base64.b64encode(pair.encode()).decode("ascii"), MASK)
                pairs.setdefault(pair, MASK)
                for secret in (password, parts.password or ""):
                    if len(secret) > 3:
                        pairs.setdefault(secret, MASK)
            selector = parts.path + (f"?{parts.query}" if parts.query else "")
            if parts.path not in ("", "/"):
                pairs.setdefault(selector, MASK)
                pairs.setdefault(repr(selector)[1:-1], MASK)
        except ValueError:
            pass
        for form in forms:
            if form:
                pairs[form] = shown
                pairs[repr(form)[1:-1]] = shown
    return sorted(pairs.items(), key=lambda pair: len(pair[0]), reverse=True)


def mask_urls(text: str, urls: Sequence[str]) -> str:
    """``text`` (an error's) with every form of each of ``urls`` (:func:`_secrets`) masked, then
    :func:`cuda13_upgrade.redact.redact_text`."""
    for secret, shown in _secrets(urls):
        text = text.replace(secret, shown)
    return redact_text(text)


def _error_text(exc: BaseException, timeout_s: float, urls: Sequence[str]) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            said = exc.read(200).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            said = ""
        text = f"HTTP {exc.code} {exc.reason}".rstrip() + (f": {said}" if said else "")
        location = exc.headers.get("Location") if 300 <= exc.code < 400 and exc.headers else None
        if location:  # the new URL may hold a key as much as the old: masked
            text += f" (a redirect to {redact_url(location)}, not followed: give the URL it redirects to)"
    else:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError | socket.timeout):
            text = f"no answer within {timeout_s:g} s (timeout_s)"
        else:
            text = str(reason) or type(reason).__name__
    return mask_urls(text, urls)


def send_all(
    targets: Sequence[Target],
    events: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    timeout_s: float,
    post: Post | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[dict[str, Any]]:
    """Send ``events`` (one event or a list, in order) to every target, all within ``timeout_s``.

    Each target gets its events one after the other in its own thread (so a target's messages keep
    their order and a slow one does not hold the others); after ``timeout_s`` the caller goes on
    whatever is left: an event in flight is a failure (``no answer within ... (timeout_s)``), one
    not begun is ``not sent``. Never raises.

    Returns one record per target and event, target by target, each ``{"event", "url" (masked),
    "format", "status": "sent" | "failed" | "not sent", "code": HTTP status or None, "error": ""
    or what failed, "elapsed_s"}``.
    """
    if isinstance(events, Mapping):
        events = [events]
    events = list(events)
    post = post or http_post
    urls = [t.url for t in targets]
    deadline = clock() + float(timeout_s)
    lock = threading.Lock()
    done: list[list[dict[str, Any]]] = [[] for _ in targets]
    began: list[float] = [0.0 for _ in targets]

    def work(index: int, target: Target) -> None:
        for event in events:
            left = deadline - clock()
            if left <= 0:
                return
            start = clock()
            with lock:
                began[index] = start
            record = {"event": event.get("event"), "url": target.display_url, "format": target.format}
            try:
                code = post(target.url, body(event, target.format), HEADERS, left)
                record.update(status="sent", code=int(code), error="")
            except Exception as exc:  # noqa: BLE001 - a notification never fails the rollout
                code = getattr(exc, "code", None)
                record.update(
                    status="failed",
                    code=code if isinstance(code, int) else None,
                    error=_error_text(exc, timeout_s, urls),
                )
            record["elapsed_s"] = round(clock() - start, 3)
            with lock:
                done[index].append(record)

    threads = [
        threading.Thread(target=work, args=(i, t), name=f"cuda13-notify-{i}", daemon=True)
        for i, t in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - clock()))
    records: list[dict[str, Any]] = []
    with lock:
        for i, target in enumerate(targets):
            finished = list(done[i])
            for k, event in enumerate(events):
                if k < len(finished):
                    records.append(finished[k])
                    continue
                base = {"event": event.get("event"), "url": target.display_url, "format": target.format}
                if k == len(finished) and threads[i].is_alive():
                    records.append(
                        {
                            **base,
                            "status": "failed",
                            "code": None,
                            "error": f"no answer within {timeout_s:g} s (timeout_s)",
                            "elapsed_s": round(max(0.0, clock() - began[i]), 3),
                        }
                    )
                else:
                    records.append(
                        {
                            **base,
                            "status": "not sent",
                            "code": None,
                            "error": f"the send's {timeout_s:g} s (timeout_s) were spent before it",
                            "elapsed_s": 0.0,
                        }
                    )
    return records


# --- the run's record ----------------------------------------------------------------------------


def load_state(run_dir: str | Path) -> dict[str, Any]:
    """``<run dir>/notifications.json``, or ``{}`` when it is missing or not a JSON object.

    Shape: ``{"run_id", "targets": [{"url" (masked), "format"}], "timeout_s", "started": bool,
    "ended": bool, "planned": [host], "announced": [host], "batches_announced": int, "sent":
    [{"event", "at", "text", "targets": [send_all's record]}]}``."""
    try:
        state = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(run_dir: str | Path, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``<run dir>/notifications.json`` (0600, redacted). Raises OSError."""
    reportfiles.write_json(Path(run_dir) / FILE, dict(state), indent=2)


def record_sends(
    state: Mapping[str, Any], events: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``state`` with one ``sent`` entry per event: ``{"event", "at", "text", "targets": [its
    records]}``; ``records`` as :func:`send_all` returns them (target by target, each target's in
    the events' order)."""
    out = dict(state)
    n = len(events)
    out["sent"] = [
        *(out.get("sent") or []),
        *(
            {
                "event": e.get("event"),
                "at": e.get("at"),
                "text": e.get("text"),
                "targets": list(records[k::n]),
            }
            for k, e in enumerate(events)
        ),
    ]
    return out


def failure_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per record not sent: ``notification batch_end not sent to http://.../*** (json):
    no answer within 5 s (timeout_s)``."""
    return [
        f"notification {r.get('event')} not sent to {r.get('url')} ({r.get('format')}): {r.get('error')}"
        for r in records
        if r.get("status") != "sent"
    ]


def run_record(run_dir: str | Path) -> list[dict[str, Any]]:
    """What ``run.json`` keeps of the run's notifications: per event sent, ``{"event", "at",
    "sent": targets reached, "targets": n, "errors": ["<url> (<format>): <error>"]}``; ``[]``
    when none was sent."""
    out = []
    for entry in load_state(run_dir).get("sent") or []:
        targets = entry.get("targets") or []
        out.append(
            {
                "event": entry.get("event"),
                "at": entry.get("at"),
                "sent": sum(1 for t in targets if t.get("status") == "sent"),
                "targets": len(targets),
                "errors": [
                    f"{t.get('url')} ({t.get('format')}): {t.get('error')}"
                    for t in targets
                    if t.get("status") != "sent"
                ],
            }
        )
    return out


def summary_lines(run_dir: str | Path) -> list[str]:
    """The summary's section ``## Notifications``: where they went, then one line per event sent
    (``- 2026-12-05T22:41:09Z batch_end: sent to 2 of 2``, with each failure); ``[]`` when the run
    sent none."""
    state = load_state(run_dir)
    if not state.get("sent"):
        return []
    where = ", ".join(f"{t.get('url')} ({t.get('format')})" for t in state.get("targets") or [])
    lines = [
        "",
        "## Notifications",
        "",
        f"{OPTION}: {where}; each send waits at most "
        f"{float(state.get('timeout_s') or DEFAULT_TIMEOUT_S):g} s (timeout_s).",
        "",
    ]
    for entry in run_record(run_dir):
        line = f"- {entry['at']} {entry['event']}: sent to {entry['sent']} of {entry['targets']}"
        if entry["errors"]:
            line += "; not sent to " + "; ".join(entry["errors"])
        lines.append(line)
    return lines
