"""Shared test plumbing: skip markers for what needs root, namespaces or Docker.

A test that needs root or Docker is skipped with a reason on a machine without them; CI runs as
root and installs Docker, so there every depth runs.
"""
import os
import shutil

import pytest


def _is_root() -> bool:
    return os.geteuid() == 0


# files whose tests run in another file's worker: the matrix slice starts the framework clients as
# the framework tests do, and two framework runs at once on a 2-core machine only slow each other
SHARED_GROUP = {"tests/integration/test_matrix.py": "tests/integration/test_frameworks.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        # `make test` runs with pytest-xdist --dist loadgroup: a file's tests stay in one worker (its
        # module fixtures, e.g. a batch run once, run once), and every Docker test shares one worker
        # (they set up and build the same images)
        path = str(item.path)
        group = "docker" if f"{os.sep}e2e{os.sep}" in path else item.nodeid.split("::", 1)[0]
        group = SHARED_GROUP.get(group, group)
        item.add_marker(pytest.mark.xdist_group(group))
        if "netns" in item.keywords and not (_is_root() and shutil.which("ip") and shutil.which("iptables")):
            item.add_marker(pytest.mark.skip(reason="needs root, iproute2 and iptables"))
