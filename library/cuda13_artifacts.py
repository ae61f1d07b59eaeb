#!/usr/bin/python
"""Action cuda13_artifacts (action_plugins/cuda13_artifacts.py): the fleet's wheels fetched once on the control node, copied to each host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_artifacts
short_description: Fetch the new stack's wheels once on the control node and copy to the host those it lacks
description:
  - On the control node, once per run and target (the first host's worker takes a lock in the cache directory
    and fetches; the others of the run wait and take its record) - C(pip download) of C(artifact_cache_requirements)
    with their whole dependency closure for the hosts' platform (C(--platform) each of C(artifact_cache_platforms),
    C(--python-version), C(--implementation), C(--abi), C(--only-binary=:all:)) into C(artifact_cache_dir), which
    keeps the wheels across runs; the control node's pip configuration files are not read. The operator is told
    what came from upstream.
  - On the host - C(artifact_cache_host_dir) is created (0755) and only the wheels it lacks, or holds with
    another checksum, are sent with Ansible's own C(copy) (0644).
  - Returns the host's directory as C(find_links), for C(cuda13_wheels) (C(--no-index --find-links)).
  - An action plugin; the logic is C(cuda13_upgrade.steps.artifacts.fetch_and_copy).
options:
  options:
    description:
      - The validated options record (C(cuda13_options)); read - C(artifact_cache_*).
      - Empty (a role's entry point on its own) - the task's C(artifact_cache_*) and C(cuda13_*) variables.
    type: dict
    default: {}
  run_id:
    description:
      - This run's identifier (C(cuda13_run_id)) - the fetch is made once per run and target, and a fetch another
        run recorded is not taken.
      - Empty - this ansible-playbook process (its pid and start time) is the run.
    type: str
    default: ""
attributes:
  check_mode: {support: full, description: Nothing is fetched; the copy reports what it would send.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Fetch the fleet's wheels once and copy them to the host
  cuda13_artifacts:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
  register: __cuda13_artifacts
"""

RETURN = r"""
find_links: {description: The host's directory of wheels (C(artifact_cache_host_dir))., type: str, returned: always}
files: {description: Every wheel the cache holds., type: list, elements: str, returned: always}
fetched_files: {description: The wheels this run's fetch brought from upstream., type: list, elements: str, returned: always}
fetched_bytes: {description: Their size in bytes., type: int, returned: always}
fetched_by: {description: The host whose worker fetched., type: str, returned: always}
copied: {description: The wheels sent to this host., type: list, elements: str, returned: always}
ansible_facts:
  description: C(artifact_cache_find_links), C(artifact_cache_files), C(artifact_cache_fetched_files), C(artifact_cache_fetched_bytes).
  type: dict
  returned: always
"""
