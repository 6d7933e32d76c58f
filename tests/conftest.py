"""Shared test plumbing: skip markers for what needs root, namespaces or Docker.

A test that needs root or Docker is skipped with a reason on a machine without them; CI runs as
root and installs Docker, so there every depth runs.
"""
import os
import shutil

import pytest


def _is_root() -> bool:
    return os.geteuid() == 0


SHARED_SCOPES = ("class", "module", "package")
# files that start framework clients (LiveKit, pipecat, ADK) from their venvs, in one worker group:
# a client's start-up is heavy on a 2-core machine. test_lk003.py's four runs go to any worker: each
# is mostly a long wait on the scenario's timers, and a run's clock starts at its app's first
# connection, so a start-up slowed by its neighbours costs the run nothing. Two workers may ask for
# the same venv at once: scripts/peers-setup.sh builds each venv under a lock, so the second waits.
# Docker files that share a fixture: test_frameworks_nonroot.py uses test_nonroot.py's user and venv
DOCKER_GROUPS = {"test_frameworks_nonroot.py": "test_nonroot"}
FRAMEWORK_GROUPS = {"test_frameworks.py": "frameworks", "test_matrix.py": "frameworks", "test_peers.py": "frameworks"}


def _group(item) -> str | None:
    """The xdist group an item must share a worker with, or None to go to any worker.

    A Docker test shares a worker with its file (DOCKER_GROUPS joins files that share fixtures):
    each builds its images under a tag of its own and names its Compose project after its run, and
    scripts/docker-setup.sh, which their fixtures may call, waits for any other one on the machine.
    A test using a class, module or package fixture shares one with its file, so that fixture (e.g. a
    batch of runs) runs once; any other test is independent (its own tmp_path, its own namespaces)
    and goes where a worker is free: test_scenarios.py alone is ~20 minutes of independent runs."""
    if f"{os.sep}e2e{os.sep}" in str(item.path):
        return "docker:" + DOCKER_GROUPS.get(item.path.name, item.path.stem)
    if item.path.name in FRAMEWORK_GROUPS and item.path.parent.name == "integration":
        return FRAMEWORK_GROUPS[item.path.name]     # (tests/unit/test_matrix.py is pure: any worker)
    defs = getattr(item, "_fixtureinfo", None)
    for fixturedefs in (defs.name2fixturedefs.values() if defs is not None else ()):
        if any(d.scope in SHARED_SCOPES for d in fixturedefs):
            return item.nodeid.split("::", 1)[0]
    return None


# tryfirst: pytest-xdist reads the xdist_group marks in its own collection hook (it suffixes each
# nodeid with the group); a mark added after it is ignored and --dist loadgroup quietly becomes
# --dist load (a module fixture then ran once per worker: test_stop's 2.5-minute batch three times)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if "netns" in item.keywords and not (_is_root() and shutil.which("ip") and shutil.which("iptables")):
            item.add_marker(pytest.mark.skip(reason="needs root, iproute2 and iptables"))


def pytest_report_header(config):
    """Which twin core the tests run against: its .py files, or their compiled build (LAB_TWIN_COMPILED=1)."""
    from lab.twin import compiled
    if compiled.which() == "compiled":
        return f"twin core: compiled ({compiled.build_dir()})"
    return "twin core: interpreted (the .py files)"

