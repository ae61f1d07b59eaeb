"""Tests of cuda13_upgrade.timeline: step durations and the time out of service,
from step records of the shape the host's run record keeps (cuda13_host_run's steps,
cuda13_upgrade.steps.host.begin_step)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade import timeline
from cuda13_upgrade.steps.host import STEPS

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "roles" / "upgrade_host" / "tasks"


def _records(*steps: tuple[str, str]) -> list[dict[str, str]]:
    return [{"step": name, "started_at": f"2025-01-01T{at}+00:00"} for name, at in steps]


FINISHED = "2025-01-01T13:00:00+00:00"


def test_each_step_lasts_until_the_next_starts():
    steps = timeline.step_durations(
        _records(("snapshot", "12:00:00"), ("toolkit", "12:00:12.5"), ("result", "12:59:58")), FINISHED
    )
    assert steps == [
        {"step": "snapshot", "started_at": "2025-01-01T12:00:00+00:00", "duration_s": 12.5},
        {"step": "toolkit", "started_at": "2025-01-01T12:00:12.5+00:00", "duration_s": 3585.5},
        {"step": "result", "started_at": "2025-01-01T12:59:58+00:00", "duration_s": 2.0},
    ]


def test_times_without_an_offset_are_utc():
    # what Ansible's now(utc=true).isoformat() writes: no offset
    steps = timeline.step_durations(
        [{"step": "wheels", "started_at": "2025-01-01T12:59:00.250000"}], FINISHED
    )
    assert steps[0]["duration_s"] == 59.8


def test_a_boundary_recorded_twice_counts_once():
    steps = timeline.step_durations(_records(("wheels", "12:00:00"), ("wheels", "12:00:05")), FINISHED)
    assert steps == [{"step": "wheels", "started_at": "2025-01-01T12:00:00+00:00", "duration_s": 3600.0}]


def test_out_of_service_from_drain_to_the_end_of_undrain():
    steps = timeline.step_durations(
        _records(
            ("sglang_build", "12:00:00"),
            ("drain", "12:10:00"),
            ("baseline", "12:10:05"),
            ("verify", "12:20:00"),
            ("undrain", "12:30:00"),
            ("result", "12:30:20"),
        ),
        FINISHED,
    )
    assert timeline.out_of_service_s(steps) == 1220.0


def test_out_of_service_without_undrain_hooks_ends_before_the_result():
    steps = timeline.step_durations(
        _records(
            ("drain", "12:10:00"), ("verify", "12:20:00"), ("rollback", "12:25:00"), ("result", "12:40:00")
        ),
        FINISHED,
    )
    assert timeline.out_of_service_s(steps) == 1800.0
    before_drain = timeline.step_durations(
        _records(("snapshot", "12:00:00"), ("result", "12:01:00")), FINISHED
    )
    assert timeline.out_of_service_s(before_drain) is None


def test_out_of_service_twice_for_a_host_the_soak_between_batches_rolled_back():
    steps = timeline.step_durations(
        _records(
            ("drain", "12:10:00"),
            ("verify", "12:20:00"),
            ("undrain", "12:25:00"),
            ("batch_soak", "12:25:10"),
            ("rollback", "12:30:00"),
            ("undrain", "12:31:00"),
            ("result", "12:31:05"),
        ),
        FINISHED,
    )
    # 12:10:00 to 12:25:10 drained for the upgrade, in service for the watch, then
    # 12:30:00 to 12:31:05 drained again for the rollback.
    assert timeline.out_of_service_s(steps) == 910.0 + 65.0
    kept = timeline.step_durations(
        _records(
            ("drain", "12:10:00"), ("undrain", "12:25:00"), ("batch_soak", "12:25:10"), ("result", "12:30:00")
        ),
        FINISHED,
    )
    assert timeline.out_of_service_s(kept) == 910.0


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"started_at": "2025-01-01T12:00:00+00:00"}], "has no 'step'"),
        ([{"step": "wheels", "started_at": "yesterday"}], "'yesterday' is not an ISO 8601 time"),
        (_records(("wheels", "12:00:00"), ("switch", "11:00:00")), "before 'wheels'"),
    ],
)
def test_bad_records_are_named(records, message):
    with pytest.raises(ValueError, match=message):
        timeline.step_durations(records, FINISHED)


def _steps_named(path: Path) -> list[str]:
    """The steps a task file of roles/upgrade_host begins, in its order: each task whose action
    is a step's (cuda13_upgrade.steps.host.STEPS), and each side of the drain bracket (drain.yml,
    whose cuda13_step task begins it)."""
    found = []

    def walk(tasks):
        for task in tasks or []:
            action = next((key for key in task if key in STEPS), None)
            if action:
                found.append(STEPS[action])
            included = str(task.get("ansible.builtin.include_tasks") or "")
            if included == "drain.yml":
                found.append(task["vars"]["__cuda13_side"])
            elif included:  # driver.yml, stack.yml: their steps where the include is
                walk(yaml.safe_load((path.parent / included).read_text()))
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    walk(yaml.safe_load(path.read_text()))
    return found


def _begins(source: str, step: str) -> bool:
    return re.search(rf'begin_step\([^)]*"{step}"', source) is not None


def test_every_step_the_play_names_passes_through_the_step_file():
    """Every step of the play is one task whose action begins it in the host's run record
    (cuda13_upgrade.steps.host.begin_step: cuda13_host_run's steps, and the host's step.json),
    the drain and undrain steps with cuda13_step (roles/upgrade_host/tasks/drain.yml), and no
    task sets the run record, so no step goes untimed or unrecorded."""
    assert _steps_named(TASKS / "main.yml") == [
        *["artifact_cache", "snapshot"],
        *["drain", "baseline"],  # driver.yml (its cuda13_driver steps begin "driver" themselves)
        *["toolkit", "wheels", "sglang_build", "drain", "baseline", "switch", "verify", "undrain"],
        *["batch_soak", "drain", "rollback", "undrain", "result"],
    ]
    assert _steps_named(TASKS / "stage.yml") == [
        *["artifact_cache", "snapshot", "toolkit", "wheels", "sglang_build", "rollback", "result"],
    ]
    assert _steps_named(TASKS / "early.yml") == ["result"]
    drain = yaml.safe_load((TASKS / "drain.yml").read_text())
    assert drain[0]["cuda13_step"]["step"] == "{{ __cuda13_side }}"
    assert _begins((ROOT / "src" / "cuda13_upgrade" / "steps" / "drain.py").read_text(), "drain")
    assert _begins((ROOT / "src" / "cuda13_upgrade" / "steps" / "drain.py").read_text(), "undrain")
    # Each step's action begins it: StepAction.STEP, or its own begin_step (the action's or its step's).
    for action, step in STEPS.items():
        plugin = (ROOT / "action_plugins" / f"{action}.py").read_text()
        module = re.search(r"from cuda13_upgrade\.steps import (\w+)", plugin)
        steps_source = (
            (ROOT / "src" / "cuda13_upgrade" / "steps" / f"{module[1]}.py").read_text() if module else ""
        )
        assert f'STEP = "{step}"' in plugin or _begins(plugin, step) or _begins(steps_source, step), action

    # The run record is kept by the actions alone: no set_fact names it.
    def set_facts(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("set_fact", "ansible.builtin.set_fact") and isinstance(value, dict):
                    yield from value
                yield from set_facts(value)
        elif isinstance(node, list):
            for item in node:
                yield from set_facts(item)

    for path in [*(ROOT / "roles").glob("*/tasks/*.yml"), *(ROOT / "playbooks").glob("*.yml")]:
        named = set(set_facts(yaml.safe_load(path.read_text())))
        assert not named & {"cuda13_host_run", "__cuda13_step", "__cuda13_steps"}, path


def test_no_step_recorded_is_no_step_not_an_error():
    # A host that failed before its first step boundary (result.yml still writes its result).
    assert timeline.step_durations([], "2026-12-03T01:00:00+00:00") == []
    assert timeline.out_of_service_s([]) is None
