"""The Compose lab's no-root parts, without Docker: which image path, which topology, and the one
line each missing piece gives (no Docker, no permission on its socket, no root for netns)."""
import subprocess

import pytest

import lab.topology as topology
import lab.topology.compose as compose
from lab.errors import CapabilityError
from lab.topology.compose import ComposeTopology, image_path


def test_image_path_comes_from_the_environment_then_dot_env_then_public(tmp_path):
    dot_env = tmp_path / ".env"
    assert image_path({}, dot_env) == "public"
    dot_env.write_text("OTHER=1\nLAB_IMAGE_BASE=offline\nLAB_BASE_IMAGE=lab-base:bookworm\n")
    assert image_path({}, dot_env) == "offline"
    assert image_path({"LAB_IMAGE_BASE": "public"}, dot_env) == "public"
    with pytest.raises(CapabilityError, match="^LAB_IMAGE_BASE must be public or offline, not 'cloud'$"):
        image_path({"LAB_IMAGE_BASE": "cloud"}, dot_env)


def test_auto_picks_compose_when_not_root_and_says_so_in_one_line(monkeypatch):
    said = []
    monkeypatch.setattr(topology.os, "geteuid", lambda: 1000)
    assert topology.choose("auto", said.append) == "compose"
    assert said == ["lab: network namespaces are not available (not root): using --topology compose"]
    assert topology.choose("netns", said.append) == "netns" and len(said) == 1


def test_auto_picks_compose_when_root_cannot_make_a_namespace(monkeypatch):
    said = []
    monkeypatch.setattr(topology.os, "geteuid", lambda: 0)
    monkeypatch.setattr(topology.Prober, "can_make_netns", lambda self: False)
    assert topology.choose("auto", said.append) == "compose"
    assert "root, but no network namespace can be made here" in said[0]
    monkeypatch.setattr(topology.Prober, "can_make_netns", lambda self: True)
    assert topology.choose("auto", said.append) == "netns" and len(said) == 1


def _docker_info(monkeypatch, rc: int, stderr: str):
    monkeypatch.setattr(compose.shutil, "which", lambda prog: "/usr/bin/" + prog)
    monkeypatch.setattr(compose, "_run", lambda argv, **kw: subprocess.CompletedProcess(argv, rc, "", stderr))


def test_docker_missing_names_the_socket_permission(monkeypatch):
    _docker_info(monkeypatch, 1, "permission denied while trying to connect to the Docker daemon socket at "
                                 "unix:///var/run/docker.sock\nerrors pretty printing info")
    monkeypatch.setenv("USER", "ana")
    assert compose.docker_missing() == "no permission on the Docker socket (add ana to the docker group)"


def test_docker_missing_names_no_cli_and_no_daemon(monkeypatch):
    monkeypatch.setattr(compose.shutil, "which", lambda prog: None)
    assert compose.docker_missing() == "no docker CLI on PATH"
    _docker_info(monkeypatch, 1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")
    assert compose.docker_missing().startswith("no Docker daemon answers (Cannot connect")


def test_without_root_or_docker_the_compose_topology_says_which_topology_would_work(monkeypatch):
    _docker_info(monkeypatch, 1, "Cannot connect to the Docker daemon")
    monkeypatch.setattr(compose.os, "geteuid", lambda: 1000)
    with pytest.raises(CapabilityError, match="^compose topology: no Docker daemon answers .*; the netns "
                                              "topology needs root instead$"):
        compose.ensure_docker()


def test_an_offline_path_without_its_wheelhouse_is_one_line_for_a_user(monkeypatch):
    monkeypatch.setattr(compose, "docker_missing", lambda: None)
    monkeypatch.setattr(compose, "_compose_ok", lambda: True)
    monkeypatch.setattr(compose, "_image_present", lambda image: True)
    monkeypatch.setattr(compose, "_wheels_fresh", lambda: False)
    monkeypatch.setenv("LAB_IMAGE_BASE", "offline")
    monkeypatch.setattr(compose.os, "geteuid", lambda: 1000)
    with pytest.raises(CapabilityError, match="offline image path lacks its base image or a fresh wheelhouse"):
        compose.ensure_docker()
    monkeypatch.setenv("LAB_IMAGE_BASE", "public")
    compose.ensure_docker()          # public: the build pulls its base, nothing to set up first


def test_kernel_caps_are_the_client_images_own(monkeypatch):
    """The probe's JSON from inside the image becomes Capabilities; its extra keys are dropped."""
    seen = {}
    monkeypatch.setattr(compose, "ensure_docker", lambda: None)
    monkeypatch.setattr(ComposeTopology, "client_image", classmethod(lambda cls: "livelab-client:t"))

    def run(argv, **kw):
        seen["argv"] = argv
        return subprocess.CompletedProcess(argv, 0, '{"root": true, "net_admin": %s, "iptables": true, '
                                                    '"nfqueue": true, "kinds": {"blackhole": []}}' % net_admin, "")
    net_admin = "true"
    monkeypatch.setattr(compose, "_run", run)
    caps = ComposeTopology.kernel_caps()
    assert caps.iptables and caps.nfqueue and not caps.netem
    assert seen["argv"][:8] == ["docker", "run", "--rm", "--network", "none", "--cap-add", "NET_ADMIN",
                                "livelab-client:t"]
    net_admin = "false"
    with pytest.raises(CapabilityError, match="got no CAP_NET_ADMIN.*--topology netns works$"):
        ComposeTopology.kernel_caps()
    monkeypatch.setattr(compose, "_run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "no image"))
    with pytest.raises(CapabilityError, match="cannot probe the kernel in livelab-client:t: no image"):
        ComposeTopology.kernel_caps()


def test_a_user_gets_the_run_folder_back_at_down(monkeypatch, tmp_path):
    t = ComposeTopology("r1", run_dir=tmp_path / "b" / "r1", secrets_dir=tmp_path / "s", setup=False)
    calls = []
    monkeypatch.setattr(compose.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(compose.os, "getuid", lambda: 1000)
    monkeypatch.setattr(compose.os, "getgid", lambda: 1001)
    monkeypatch.setattr(ComposeTopology, "health", lambda self: {"client": "running"})
    monkeypatch.setattr(ComposeTopology, "compose", lambda self, *a, **kw: calls.append(a))
    t.give_back_run_dir()
    assert calls == [("exec", "-T", "client", "chown", "-R", "1000:1001", "/captures/r1", "/secrets")]
    monkeypatch.setattr(compose.os, "geteuid", lambda: 0)
    t.give_back_run_dir()
    assert len(calls) == 1, "root needs nothing handed back"


def test_offline_from_the_environment_alone_builds_on_the_offline_base(monkeypatch, tmp_path):
    """CI sets LAB_IMAGE_BASE=offline and nothing else: compose must get the mmdebstrap base too."""
    monkeypatch.setattr(compose, "DOT_ENV", tmp_path / ".env")          # no .env
    monkeypatch.setattr(compose, "image_path", lambda: "offline")
    monkeypatch.delenv("LAB_BASE_IMAGE", raising=False)
    env = ComposeTopology("r1", run_dir=tmp_path / "b" / "r1", setup=False)._env()
    assert env["LAB_IMAGE_BASE"] == "offline" and env["LAB_BASE_IMAGE"] == compose.BASE_IMAGE
    monkeypatch.setattr(compose, "image_path", lambda: "public")
    env = ComposeTopology("r1", run_dir=tmp_path / "b" / "r1", setup=False)._env()
    assert env["LAB_BASE_IMAGE"] == compose.PUBLIC_BASE_IMAGE
    monkeypatch.setenv("LAB_BASE_IMAGE", "mirror.example/python:3.11-slim")
    env = ComposeTopology("r1", run_dir=tmp_path / "b" / "r1", setup=False)._env()
    assert env["LAB_BASE_IMAGE"] == "mirror.example/python:3.11-slim", "a user's own base wins"
