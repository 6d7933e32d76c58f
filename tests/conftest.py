"""Shared test plumbing: skip markers for what needs root, namespaces or Docker.

A test that needs root or Docker is skipped with a reason on a machine without them; CI runs as
root and installs Docker, so there every depth runs.
"""
import os
import shutil

import pytest


def _is_root() -> bool:
    return os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "netns" in item.keywords and not (_is_root() and shutil.which("ip") and shutil.which("iptables")):
            item.add_marker(pytest.mark.skip(reason="needs root, iproute2 and iptables"))
