"""What the server really runs with: its effective arguments and the paths it turned off.

A server may take an argument and not use it. SGLang checks some requests only
when its workers start, after the arguments were parsed: the argument stays in
the server's arguments while the path it asked for is off, and only a log line
says so. A release that turned FlashInfer's allreduce fusion on by default
crashed on sm_120 (sgl-project/sglang#15650); ``--enable-torch-symm-mem``
"silently degrades to NCCL" where multicast is unavailable
(sgl-project/sglang#30364); custom allreduce turns itself off on more than two
PCIe-only GPUs. The operator who upgraded for such a path would keep a stack
whose gain is not there.

Two records per profile and stack, read right after the server generates
(``hostscripts/service_cycle.py``):

- ``GET /get_server_info``: SGLang returns ``{**dataclasses.asdict(server_args),
  **scheduler_info, "internal_states": [...], "version": __version__}``
  (python/sglang/srt/entrypoints/http_server.py ``get_server_info``,
  sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d): the arguments
  as the server resolved them, one key per ``ServerArgs`` field. A field's CLI
  flag is its name with ``-`` for ``_`` (``tp_size`` is ``--tp-size``,
  python/sglang/srt/server_args.py, sgl-project/sglang@001067fffe33427bee0ed2f007fb7551a1d76b44).
- the service's journal since it started: the lines in which SGLang says it
  turned a path off (``DISABLED_TEXTS``, each with its source). SGLang's log
  format is ``[%(asctime)s{prefix}] %(message)s`` (``configure_logger``; the
  prefix names the rank, `` TP0``): the message is searched for anywhere in the line.

Everything here is pure: plain data in, plain data out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ACTIONS",
    "DISABLED_TEXTS",
    "compare_stacks",
    "disabled_lines",
    "effective_config",
    "profile_effective",
    "requested_args",
    "unused_flags",
]

#: What ``verify_throughput_disabled_flag_action`` may say.
ACTIONS = ("report", "rollback")

#: Keys of /get_server_info that are no argument, or change on every start.
#: ``random_seed`` is drawn at each start when not given (ServerArgs).
_NOT_ARGS = frozenset({"internal_states", "version", "random_seed"})

_CUSTOM_AR = "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py"
_CUSTOM_AR_REF = "sgl-project/sglang@004e6561cb8ae26d62166c15782955f99f058274"
_SYMM_MEM = "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py"
_SYMM_MEM_REF = "sgl-project/sglang@5a7255c6fb5709a643e9a0bf22dbba12d4c424a8"

#: SGLang's messages that say a path was turned off at start-up: the path, the
#: CLI flags whose gain it takes away (``[]``: a path on by default), a regular
#: expression of the message (the real text; ``%d``/``%s`` become a number),
#: and where the text comes from.
DISABLED_TEXTS: tuple[dict[str, Any], ...] = (
    {
        "path": "custom allreduce",
        "flags": [],
        "pattern": re.escape(
            "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
            "To silence this warning, specify disable_custom_all_reduce=True explicitly."
        ),
        "source": f"{_CUSTOM_AR} (CustomAllreduce.__init__), {_CUSTOM_AR_REF}",
    },
    {
        "path": "custom allreduce",
        "flags": [],
        "pattern": re.escape(
            "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test "
            "failed. To silence this warning, specify disable_custom_all_reduce=True explicitly."
        ),
        "source": f"{_CUSTOM_AR} (CustomAllreduce.__init__), {_CUSTOM_AR_REF}",
    },
    {
        "path": "custom allreduce",
        "flags": [],
        "pattern": re.escape("Custom allreduce is disabled due to an unsupported world size: ")
        + r"\d+"
        + re.escape(". Supported world sizes: "),
        "source": f"{_CUSTOM_AR} (CustomAllreduce.__init__), {_CUSTOM_AR_REF}",
    },
    {
        "path": "custom allreduce",
        "flags": [],
        "pattern": re.escape("Custom allreduce is disabled because this process group spans across nodes."),
        "source": f"{_CUSTOM_AR} (CustomAllreduce.__init__), {_CUSTOM_AR_REF}",
    },
    {
        "path": "torch symmetric memory allreduce",
        "flags": ["--enable-torch-symm-mem"],
        "pattern": re.escape(
            "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
        ),
        "source": f"{_SYMM_MEM} (TorchSymmMemCommunicator.__init__), {_SYMM_MEM_REF}",
    },
    {
        "path": "torch symmetric memory allreduce",
        "flags": ["--enable-torch-symm-mem"],
        "pattern": re.escape("TorchSymmMemCommunicator: World size ")
        + r"\d+"
        + re.escape(" not supported, communicator is not available."),
        "source": f"{_SYMM_MEM} (TorchSymmMemCommunicator.__init__), {_SYMM_MEM_REF}",
    },
    {
        "path": "torch symmetric memory allreduce",
        "flags": ["--enable-torch-symm-mem"],
        "pattern": re.escape("TorchSymmMemCommunicator: Device capability ")
        + r"\d+"
        + re.escape(" not supported, communicator is not available."),
        "source": f"{_SYMM_MEM} (TorchSymmMemCommunicator.__init__), {_SYMM_MEM_REF}",
    },
)

_COMPILED = tuple((entry, re.compile(entry["pattern"])) for entry in DISABLED_TEXTS)


def disabled_lines(lines: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The paths the server's start-up log says it turned off.

    ``lines``: the journal's lines since the service started (text; other items
    are skipped). Returns one record per path, in the order first seen:
    ``{"path", "flags", "line", "ranks", "source"}``; ``line`` the first line
    that said so, ``ranks`` how many lines did (each rank logs its own).
    """
    found: dict[str, dict[str, Any]] = {}
    for line in lines or []:
        if not isinstance(line, str):
            continue
        for entry, pattern in _COMPILED:
            if pattern.search(line):
                record = found.setdefault(
                    entry["path"],
                    {
                        "path": entry["path"],
                        "flags": list(entry["flags"]),
                        "line": line.strip(),
                        "ranks": 0,
                        "source": entry["source"],
                    },
                )
                record["ranks"] += 1
                break
    return list(found.values())


def effective_config(server_info: Any, log_lines: Sequence[Any] | None) -> dict[str, Any]:
    """One profile's effective configuration on one stack.

    ``server_info``: the JSON object ``/get_server_info`` answered (None or
    anything else when it could not be read). ``log_lines``: the journal's
    lines since the start. Returns ``{"read": bool, "version": str | None,
    "args": {field: value}, "disabled": disabled_lines(...)}``; ``args`` holds
    the server's arguments: every key but ``internal_states``, ``version`` and
    ``random_seed``, and no nested object (a state, not an argument).
    """
    info = server_info if isinstance(server_info, Mapping) else None
    args = {}
    if info is not None:
        args = {
            str(key): value
            for key, value in info.items()
            if key not in _NOT_ARGS and not isinstance(value, Mapping)
        }
    return {
        "read": info is not None,
        "version": str(info["version"]) if info is not None and info.get("version") is not None else None,
        "args": dict(sorted(args.items())),
        "disabled": disabled_lines(log_lines),
    }


def _field(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def requested_args(args: Sequence[Any]) -> list[dict[str, Any]]:
    """The flags of an argument list, each with the value asked for.

    ``--flag value`` asks for ``value`` (a string), ``--flag=value`` too, a
    flag followed by another flag (or last) asks for ``True``. Returns
    ``[{"flag": "--enable-torch-symm-mem", "field": "enable_torch_symm_mem", "asked": True}]``;
    words that are no flag and follow none are skipped.
    """
    words = [str(a) for a in args]
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            i += 1
            continue
        if "=" in word:
            flag, value = word.split("=", 1)
            out.append({"flag": flag, "field": _field(flag), "asked": value})
            i += 1
            continue
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            out.append({"flag": word, "field": _field(word), "asked": words[i + 1]})
            i += 2
            continue
        out.append({"flag": word, "field": _field(word), "asked": True})
        i += 1
    return out


def _same(asked: Any, reported: Any) -> bool:
    """Whether a reported value is what was asked (``"3"`` asked, ``3`` reported)."""
    if asked is True:
        return reported is True
    if isinstance(reported, bool):
        return str(asked).strip().lower() in (("true", "1") if reported else ("false", "0"))
    if isinstance(reported, list):
        return [str(v) for v in reported] == str(asked).split(",") or str(reported) == str(asked)
    if isinstance(reported, (int, float)):
        try:
            return float(asked) == float(reported)
        except ValueError:
            return False
    return str(reported) == str(asked)


def unused_flags(new_stack_args: Sequence[Any], effective: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The new-stack-only flags the new server reports off or other than asked.

    ``new_stack_args``: the profile's arguments added on the new stack only.
    ``effective``: the profile's ``effective_config`` on the new stack (None or
    unread: nothing can be told, ``[]``). A flag is unused when
    ``/get_server_info`` reports its field with another value, or a start-up
    line says the path it asks for was turned off. Returns ``[{"flag", "asked",
    "reported", "why"}]`` in the arguments' order; ``reported`` is the field's
    value (None when the server does not report it).
    """
    if not isinstance(effective, Mapping) or not effective.get("read"):
        return []
    reported_args = effective.get("args") or {}
    disabled = effective.get("disabled") or []
    out = []
    for request in requested_args(new_stack_args):
        field = request["field"]
        reported = reported_args.get(field)
        reasons = []
        if field in reported_args and not _same(request["asked"], reported):
            reasons.append(f"/get_server_info reports {field}={reported!r}")
        for record in disabled:
            if request["flag"] in record.get("flags", []):
                reasons.append(f"the server logged: {record['line']}")
        if reasons:
            out.append(
                {
                    "flag": request["flag"],
                    "asked": request["asked"],
                    "reported": reported,
                    "why": "; ".join(reasons),
                }
            )
    return out


def compare_stacks(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    """The differences between a profile's effective configurations on the two stacks.

    ``old``, ``new``: ``effective_config`` records (None when not read).
    Returns ``{"read": bool, "args": [{"arg", "old", "new"}], "disabled": [{"path",
    "old": bool, "new": bool}], "version": {"old", "new"}}``: ``args`` every
    field whose value differs (a field one side lacks reads None there), sorted
    by name; ``disabled`` every path turned off on one stack and not the other.
    ``read`` is false when either side was not read: nothing is compared.
    """
    if not (isinstance(old, Mapping) and old.get("read") and isinstance(new, Mapping) and new.get("read")):
        return {"read": False, "args": [], "disabled": [], "version": {}}
    old_args, new_args = old.get("args") or {}, new.get("args") or {}
    args = [
        {"arg": key, "old": old_args.get(key), "new": new_args.get(key)}
        for key in sorted(set(old_args) | set(new_args))
        if old_args.get(key) != new_args.get(key)
    ]
    old_paths = {r["path"] for r in old.get("disabled") or []}
    new_paths = {r["path"] for r in new.get("disabled") or []}
    disabled = [
        {"path": path, "old": path in old_paths, "new": path in new_paths}
        for path in sorted(old_paths ^ new_paths)
    ]
    return {
        "read": True,
        "args": args,
        "disabled": disabled,
        "version": {"old": old.get("version"), "new": new.get("version")},
    }


def profile_effective(throughput: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per profile, what the host's result shows of the effective configurations.

    ``throughput``: the result's ``throughput`` (``{phase: {profile: {...,
    "new_stack_args", "effective"}}}``). Returns ``{profile: {"compared":
    compare_stacks(baseline, candidate), "disabled": {"baseline": [...],
    "candidate": [...]}, "unused_flags": unused_flags(...)}}`` for every profile
    of the candidate phase; ``{}`` when there is none.
    """
    throughput = throughput or {}
    baseline = throughput.get("baseline") or {}
    candidate = throughput.get("candidate") or {}
    out: dict[str, dict[str, Any]] = {}
    for name, measured in candidate.items():
        if not isinstance(measured, Mapping):
            continue
        old = (baseline.get(name) or {}).get("effective") if isinstance(baseline.get(name), Mapping) else None
        new = measured.get("effective")
        out[str(name)] = {
            "compared": compare_stacks(old, new),
            "disabled": {
                "baseline": list((old or {}).get("disabled") or []),
                "candidate": list((new or {}).get("disabled") or []),
            },
            "unused_flags": unused_flags(measured.get("new_stack_args") or [], new),
        }
    return out
