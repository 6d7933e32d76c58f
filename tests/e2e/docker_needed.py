"""What an end-to-end test does when it needs Docker.

As root (CI), it starts what is missing with scripts/docker-setup.sh, which waits for a set-up
already running (another worker's, or `make test`'s images phase): a stopped dockerd is something
to start, not a reason to skip. A failure to set up is the test's error, never a skip. Without root
nothing can be installed: the test skips when no engine answers.
"""
import os

import pytest

from lab.topology.compose import docker_ready, ensure_docker


def docker_or_skip() -> None:
    if os.geteuid() == 0:
        ensure_docker(log=None)
    elif not docker_ready():
        pytest.skip("needs a Docker engine (scripts/docker-setup.sh as root)")
