"""Builders of the sandbox's package sources (apt repository, PEP 503 indexes, git repository).

`build.py` beside this package is the entry point; `catalog` holds the names and versions
the stand-ins carry, `testkit` the helpers the pytest suite uses to exercise them.
"""
