"""SGLang, sandbox stand-in: a simulated server and a real benchmark client.

Kept light on purpose: ``python -m sglang.bench_serving`` imports this package and must run
even where the GPU stack is broken. See ``sglang.launch_server`` and ``sglang.bench_serving``.
"""

from sglang.version import __version__

__all__ = ["__version__"]
