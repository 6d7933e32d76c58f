"""ComposeTopology's pure parts: project names, host-to-container argv translation (no Docker needed)."""
import os
import sys
from pathlib import Path

from lab.topology.compose import ComposeTopology, _project_name


def test_project_name_is_compose_safe():
    assert _project_name("B1 Silent/Loss-01") == "livelab-b1-silent-loss-01"
    assert _project_name("///") == "livelab-run"


def test_the_same_run_id_in_two_batches_gets_two_projects(tmp_path):
    a = ComposeTopology("x", run_dir=tmp_path / "a" / "r2-freeze-probe-01", setup=False)
    b = ComposeTopology("x", run_dir=tmp_path / "b" / "r2-freeze-probe-01", setup=False)
    assert a.project != b.project and a.project.startswith("livelab-r2-freeze-probe-01-")
    assert a.project == ComposeTopology("y", run_dir=tmp_path / "a" / "r2-freeze-probe-01", setup=False).project


def test_argv_translation(tmp_path):
    run_dir = tmp_path / "batch" / "r2-freeze-probe-01"
    t = ComposeTopology("x", run_dir=run_dir, secrets_dir=tmp_path / "sec", setup=False)
    assert t.run_id == "r2-freeze-probe-01" and t.run_dir == run_dir.resolve()
    argv = t.container_argv([sys.executable, "-m", "lab", "agent", "--run-dir", str(run_dir.resolve()),
                             "--keylog", str((tmp_path / "sec" / "keys.log").resolve()), "--ca", "/certs/ca.pem"])
    assert argv == ["python", "-m", "lab", "agent", "--run-dir", "/captures/r2-freeze-probe-01",
                    "--keylog", "/secrets/keys.log", "--ca", "/certs/ca.pem"]
    assert t.container_path(str(tmp_path / "elsewhere")) == str(tmp_path / "elsewhere")
    env = t._env()
    assert env["RUN_ID"] == "r2-freeze-probe-01" and env["CAPTURES_DIR"] == str((tmp_path / "batch").resolve())
    assert env["SECRETS_DIR"] == str((tmp_path / "sec").resolve())


def test_compose_argv_layers_files(tmp_path):
    over = tmp_path / "over.yaml"
    t = ComposeTopology("run-1", project="p1", extra_files=[over], setup=False)
    argv = t.compose_argv("ps")
    assert argv[:4] == ["docker", "compose", "-p", "p1"]
    assert argv[-1] == "ps" and str(over) in argv and argv[argv.index(str(over)) - 1] == "-f"
    assert t.ca_path == Path("/certs/ca.pem") and t.endpoint_host == "endpoint" and t.endpoint_port == 8443


def test_compose_yaml_holds_two_idle_nodes_and_no_service_command_lines():
    """The services' arguments live in lab/topology/services.py only: a command line here could
    drift from the netns topology's (as the proxy's --freeze-first and the twin's --t0 did)."""
    import yaml

    from lab.topology.compose import COMPOSE_FILE, LAB_SERVICES

    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert set(services) == set(LAB_SERVICES) == {"endpoint", "client", "capture"}
    assert all(s["command"] == ["sleep", "infinity"] for s in services.values())
    assert "NET_ADMIN" in services["client"]["cap_add"]


def test_the_capture_is_a_sidecar_in_the_clients_namespace_on_the_network_sides_image():
    """The card's shape: the capture outlives a client that dies, and the client image is not the
    network side's (no capture tools needed from it, no client packages in the other)."""
    import yaml

    from lab.topology.compose import COMPOSE_FILE, ROUTER_FILE

    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    cap, client, ep = services["capture"], services["client"], services["endpoint"]
    assert cap["network_mode"] == "service:client" and {"NET_ADMIN", "NET_RAW"} <= set(cap["cap_add"])
    assert client["build"]["dockerfile"] == "Dockerfile.client" and ep["build"]["dockerfile"] == "Dockerfile.proxy"
    assert cap["image"] == ep["image"] != client["image"] and cap["pull_policy"] == "never"
    assert yaml.safe_load(ROUTER_FILE.read_text())["services"]["router"]["image"] == ep["image"]
    # a run's client tcpdumps go to the sidecar; the endpoint's own processes stay on the endpoint
    topo = ComposeTopology("run-1", project="p1", setup=False)
    assert topo.client.capture_node is topo.capture and topo.endpoint.capture_node is topo.endpoint
    from lab.topology.services import Capture
    assert {node.service for node, *_ in Capture.of(topo, topo.run_dir).plan()} == {"capture"}
    assert [args[:2] for _n, _r, args, _f in Capture.of(topo, topo.run_dir).plan()] == [["-i", "eth0"], ["-i", "nflog:5"]]


def test_the_network_sides_requirements_are_the_clients_minus_the_client_packages():
    """docker/requirements-proxy.txt installs from the wheelhouse built for docker/requirements.txt."""
    from pathlib import Path
    import re

    def names(f):
        return {re.split(r"[<>=!~\[ ]", l.split("#")[0].strip(), 1)[0].lower()
                for l in (Path(__file__).resolve().parents[2] / "docker" / f).read_text().splitlines()
                if l.split("#")[0].strip()}
    proxy, client = names("requirements-proxy.txt"), names("requirements.txt")
    assert proxy < client
    # the client's SDK and camera stay on the client's side (numpy crosses over: the twin's ear
    # resamples a turn not sent at 16 kHz)
    assert not proxy & {"google-genai", "pillow", "openai"}


def test_links_layer_the_router_overlay_and_add_the_router_node(tmp_path):
    import pytest
    import yaml

    from lab.errors import LabError
    from lab.topology.compose import ROUTER_FILE

    plain = ComposeTopology("run-1", project="p1", setup=False)
    routed = ComposeTopology("run-1", project="p1", setup=False, links=["wifi", "cell"])
    assert plain.router is None and ROUTER_FILE not in plain.files
    assert routed.router.service == "router" and routed.files[1] == ROUTER_FILE
    assert [l.name for l in routed.links] == ["wifi", "cell"]
    over = yaml.safe_load(ROUTER_FILE.read_text())
    nets = {s: set(v["networks"]) for s, v in over["services"].items()}
    # ctl: the agent's way to the router service, shared by client and router only
    assert nets == {"router": {"wifi", "cell", "core", "ctl"}, "client": {"wifi", "cell", "ctl"}, "endpoint": {"core"}}
    assert over["services"]["router"]["sysctls"]["net.ipv4.ip_forward"] == "1"
    assert over["services"]["router"]["security_opt"] == ["systempaths=unconfined"]   # conntrack's sysctls
    assert [l.name for l in routed.router_part.links] == ["wifi", "cell"] and plain.router_part is None
    shaped = ComposeTopology("run-1", project="p1", setup=False, links=[{"wifi": {"rtt_ms": 40}}])
    assert shaped.router_part.links[0].rtt_ms == 40     # made by the router service (tests/e2e)
    with pytest.raises(LabError, match="links"):
        ComposeTopology("run-1", project="p1", setup=False, links=["lte"])


def test_lab_down_drops_a_killed_router_projects_docker_user_rules_only(monkeypatch):
    import subprocess

    from lab.topology import compose

    listing = ('-N DOCKER-USER\n'
               '-A DOCKER-USER -i br-1 -o br-1 -m comment --comment "livelab livelab-a router" -j ACCEPT\n'
               '-A DOCKER-USER -i br-2 -o br-2 -m comment --comment "livelab livelab-ab router" -j ACCEPT\n'
               '-A DOCKER-USER -j RETURN\n')
    calls = []

    def fake_run(argv, timeout=None, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, listing if "-S" in argv else "", "")

    monkeypatch.setattr(compose, "_run", fake_run)
    monkeypatch.setattr(compose.os, "geteuid", lambda: 0)
    monkeypatch.setattr(compose.shutil, "which", lambda tool: "/usr/sbin/" + tool)
    compose._drop_router_rules("livelab-a")
    deleted = [c for c in calls if "-D" in c]
    assert deleted == [["iptables", "-w", "-D", "DOCKER-USER", "-i", "br-1", "-o", "br-1", "-m", "comment",
                        "--comment", "livelab livelab-a router", "-j", "ACCEPT"]]


def test_lab_down_layers_the_router_overlay_only_on_router_projects(monkeypatch):
    import os
    import subprocess

    from lab.topology import compose
    from netem import cleanup

    calls = []
    live, dead = cleanup.owner_token(), "1:1"       # pid 1 never started at tick 1: gone
    rules = ('-A DOCKER-USER -i br-9 -o br-9 -m comment --comment "livelab livelab-gone router" -j ACCEPT\n'
             '-A DOCKER-USER -j RETURN\n')

    def fake_run(argv, timeout=None, **kw):
        calls.append(argv)
        out = ""
        if argv[:2] == ["docker", "ps"]:
            out = (f"livelab-r1 router {dead}\nlivelab-r1 client {dead}\nlivelab-p1 client \n"
                   f"livelab-l1 client {live}\nlivelab-l1 endpoint {live}\nother x\n")
        elif argv[:4] == ["iptables", "-w", "-S", "DOCKER-USER"]:
            out = rules
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(compose, "_run", fake_run)
    monkeypatch.setattr(compose, "docker_ready", lambda: True)
    monkeypatch.setattr(compose.shutil, "which", lambda tool: "/usr/bin/" + tool)
    monkeypatch.setattr(compose.os, "geteuid", lambda: 0)
    # a live owner's project is listed and left; an ownerless one (compose run by hand) and a dead
    # owner's go, and so do the rules of a router project whose containers are already gone
    assert compose.down_all() == {"removed": ["livelab-p1", "livelab-r1", "livelab-gone"],
                                  "spared": [f"livelab-l1 (pid {os.getpid()})"]}
    downs = {c[3]: [c[i + 1] for i, a in enumerate(c) if a == "-f"] for c in calls if "down" in c}
    assert downs == {"livelab-p1": [str(compose.COMPOSE_FILE)],
                     "livelab-r1": [str(compose.COMPOSE_FILE), str(compose.ROUTER_FILE)]}
    deleted = [c for c in calls if c[:3] == ["iptables", "-w", "-D"]]
    assert [c[c.index("--comment") + 1] for c in deleted] == ["livelab livelab-gone router"]
    # an owner filter takes only that owner's projects: here none is dead, so nothing goes
    calls.clear()
    assert compose.down_all(owner_pids={os.getpid()}) == {"removed": [], "spared": [f"livelab-l1 (pid {os.getpid()})"]}
    assert not [c for c in calls if "down" in c or "-D" in c]


def test_runs_side_by_side_build_the_images_once(monkeypatch, tmp_path):
    import subprocess
    import threading
    import time

    from lab.topology import compose
    monkeypatch.setattr(compose, "ensure_docker", lambda *a, **k: None)
    monkeypatch.setattr(compose, "_BUILT_IN_PROCESS", set())
    calls, building, most = [], [0], [0]
    lock = threading.Lock()

    def fake_compose(self, *args, **kw):
        built = "--build" in args
        with lock:
            calls.append(built)
            building[0] += built
            most[0] = max(most[0], building[0])
        time.sleep(0.05)            # long enough for the others to arrive while it builds
        with lock:
            building[0] -= built
        return subprocess.CompletedProcess(args, 0, "", "")
    monkeypatch.setattr(compose.ComposeTopology, "compose", fake_compose)
    monkeypatch.setattr(compose.ComposeTopology, "containers", lambda self: {})
    monkeypatch.setattr(compose.ComposeTopology, "_image_key", lambda self: ("same",))
    topos = [compose.ComposeTopology(f"run{i}", captures_dir=tmp_path) for i in range(3)]
    threads = [threading.Thread(target=t.up) for t in topos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls.count(True) == 1 and len(calls) == 3 and most[0] == 1
