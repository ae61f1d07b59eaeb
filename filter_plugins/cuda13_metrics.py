"""Filter that renders a host's Prometheus textfile (cuda13_upgrade.metrics)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import metrics
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_host_metrics
    short_description: A host's result as node_exporter textfile-collector metrics (Prometheus text format).
    options:
      _input:
        description: the host's result (cuda13_result of roles/upgrade_host/tasks/result.yml)
        type: dict
        required: true
"""

EXAMPLES = r"""
content: "{{ cuda13_result | cuda13_host_metrics }}"
"""

RETURN = r"""
  _value:
    description: the text of cuda13_upgrade.prom
"""


def cuda13_host_metrics(result):
    if not isinstance(result, dict):
        raise AnsibleFilterError(f"cuda13_host_metrics expects a host result (a dict), got {result!r}")
    return metrics.host_metrics(result)


class FilterModule:
    def filters(self):
        return ansible_filters({"cuda13_host_metrics": cuda13_host_metrics})
