#!/usr/bin/python
"""Action cuda13_report_file (action_plugins/cuda13_report_file.py): write one file of the run's report on the control node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_report_file
short_description: Write one file of the run's report on the control node, atomically
description:
  - The parent directories are created; the file is replaced atomically (a temporary file in the same
    directory, then C(os.replace)), so a reader never sees half a result.
  - Runs in the controller's own process - no module run.
options:
  path: {description: The file on the control node., type: str, required: true}
  content: {description: The text to write., type: str, required: true}
  mode:
    description:
      - "The file's mode, an octal string such as C('0600'), or a number. Reports are private: the
        directories created are 0700."
      - The text is written redacted (unit C(Environment=) values, URL userinfo, C(--api-key) values).
    type: raw
    default: "0600"
attributes:
  check_mode: {support: full, description: Writes nothing; says whether it would change.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Write the result on the control node
  cuda13_report_file:
    path: reports/run/host/result.json
    content: "{{ result | to_nice_json }}"
"""

RETURN = r"""
path: {description: The file's absolute path., type: str, returned: always}
"""
