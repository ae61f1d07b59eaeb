"""Stand-ins for the host modules ``cuda13_service`` and ``cuda13_bench``, for playbook tests that run
the measuring actions (``cuda13_verify``, ...) through ansible-playbook on localhost.

The test machine has no systemd as PID 1 and no GPU server, so the two modules that restart the
service and benchmark it are replaced, for one run, by modules of the same names in a directory
put first on ``ANSIBLE_LIBRARY`` (:func:`library`). They take the real modules' argument specs
(``SERVICE_SPEC``, ``BENCH_SPEC``, through ``module_utils``: a step that passes a bad argument fails
as it would on a host) and answer from the test's records, per profile:

``cuda13_service`` keeps what the server runs in a state file: a restart starts it with the
profile's arguments, ``restart: never`` leaves it as it is (the first profile of a phase that
the step before started), and every answer names a main process that runs the service's own
command with those arguments, as ``/proc/<pid>/cmdline`` would. ``cuda13_bench`` answers for
the profile whose arguments the server runs: its ``trials``, its probe's ``outputs``, its
``load`` and ``soak``. Both log each call (:func:`calls`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playbook import REPO

SERVICE = '''#!/usr/bin/python
"""Stand-in of cuda13_service (tests/servedouble.py)."""
import base64
import json
import shlex

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.service_cycle import SERVICE_SPEC

STATE = {state!r}


def main():
    module = AnsibleModule(argument_spec=SERVICE_SPEC, supports_check_mode=True)
    p = module.params
    with open(STATE) as handle:
        state = json.load(handle)
    if p["exec_start"]:
        state["exec_start"] = p["exec_start"]
    restarted = p["restart"] == "always"
    if p["restart"] == "when-changed":
        restarted = bool(p["changed"]) or state["args"] != list(p["args"])
    if module.check_mode:
        module.exit_json(changed=False, dropin_changed=False, cycle=None, ok=True)
    if restarted:
        state["args"] = list(p["args"])
    state["calls"].append({{"module": "cuda13_service", "restart": p["restart"], "args": list(p["args"]),
                           "restarted": restarted, "url": p["url"]}})
    with open(STATE, "w") as handle:
        json.dump(state, handle)
    argv = shlex.split(state.get("exec_start") or "") + list(state["args"] or [])
    cycle = {{
        "unit": p["unit"], "restart": p["restart"], "restarted": restarted,
        "release": {{"free": True, "waited_s": 0.0, "leftovers": [], "signalled": {{}}, "still_running": [],
                     "others": [], "nvidia_smi_error": None}} if restarted else None,
        "start_error": None,
        "ready": {{"generated": True, "endpoint": "/health_generate", "waited_s": 0.1, "last": "200"}}
        if p["url"] else None,
        "journal": [], "main_pid": 4300,
        "cmdline_b64": base64.b64encode("".join(a + "\\0" for a in argv).encode()).decode(),
    }}
    module.exit_json(changed=restarted, dropin_changed=False, cycle=cycle, ok=True)


if __name__ == "__main__":
    main()
'''

BENCH = '''#!/usr/bin/python
"""Stand-in of cuda13_bench (tests/servedouble.py)."""
import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.completion_bench import BENCH_SPEC

STATE = {state!r}


def main():
    module = AnsibleModule(argument_spec=BENCH_SPEC, supports_check_mode=True)
    p = module.params
    with open(STATE) as handle:
        state = json.load(handle)
    served = [name for name, answer in state["profiles"].items() if answer["args"] == state["args"]]
    if not served:
        module.fail_json(msg="the stand-in server runs %r, no profile's arguments" % (state["args"],))
    answer = state["profiles"][served[0]]
    state["calls"].append({{"module": "cuda13_bench", "mode": p["mode"], "profile": served[0]}})
    with open(STATE, "w") as handle:
        json.dump(state, handle)
    if p["mode"] == "trials":
        bench = {{"trials": answer.get("trials") or []}}
    elif p["mode"] == "probe":
        bench = {{"max_new_tokens": p["max_new_tokens"], "outputs": answer.get("probe") or []}}
    elif p["mode"] == "load":
        bench = {{"load": answer.get("load") or {{}}, "soak": answer.get("soak") or {{}}}}
    else:
        module.fail_json(msg="the stand-in does not watch")
    module.exit_json(changed=False, bench=dict(bench, url=p["url"]))


if __name__ == "__main__":
    main()
'''


def library(
    tmp_path: Path, profiles: Mapping[str, Mapping[str, Any]], *, running: list | None = None
) -> dict:
    """Write the stand-ins under ``tmp_path/standin-library`` and return the environment that puts
    them first (``run_playbook(..., env=...)``).

    ``profiles``: ``{name: {"args": [the profile's arguments on this stack], "trials": [...],
    "probe": [...], "load": {...}, "soak": {...}}}``. ``running``: the arguments the server runs
    with as the play starts (None: not started; the first call starts it).
    """
    lib = tmp_path / "standin-library"
    lib.mkdir()
    state = lib / "state.json"
    state.write_text(json.dumps({"args": running, "exec_start": "", "profiles": dict(profiles), "calls": []}))
    (lib / "cuda13_service.py").write_text(SERVICE.format(state=str(state)))
    (lib / "cuda13_bench.py").write_text(BENCH.format(state=str(state)))
    return {"ANSIBLE_LIBRARY": os.pathsep.join([str(lib), str(REPO / "library")])}


def calls(tmp_path: Path) -> list[dict]:
    """Every call of the stand-ins, in order: ``{"module": "cuda13_service", "restart", "args",
    "restarted", "url"}`` or ``{"module": "cuda13_bench", "mode", "profile"}``."""
    return json.loads((tmp_path / "standin-library" / "state.json").read_text())["calls"]
