"""The Kubernetes fan-out: manifests generated from the topology's one definition (compose.yaml's two
nodes, the service objects' command lines), valid offline, the budget split honest, the pod topology
standing in for what the pod spec runs, and the GitHub Actions fan-out valid against GitHub's schema.
No cluster is involved anywhere here."""
import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from lab.deploy import ci_matrix as matrix, fan_in, shard
from lab.deploy import kubernetes as k8s
from lab.deploy.compose_file import nodes, resolve
from lab.deploy.shards import DONE_MARKER, split_budget
from lab.errors import CapabilityError, LabError
from lab.run import TWIN_KEY
from lab.topology import pod
from lab.topology.pod import PodNode, PodTopology
from lab.topology.services import Capture, Twin

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
FANOUT = ROOT / ".github" / "workflows" / "fanout.yml"
K8S_VERSION = "1.30.0"       # a version kubernetes-validate ships schemas for; Indexed Jobs with per-index backoff


def unescape(text: str) -> str:
    """What the kubelet makes of a command with no $(VAR) in it: `$$` is one `$`."""
    return text.replace("$$", "$")


def render(**kw) -> list[dict]:
    kw.setdefault("budget", 10)
    return k8s.render(k8s.make_plan(kw.pop("scenario", "b1-silent-loss"), kw.pop("completions", 3), **kw))


def by_kind(objs: list[dict], kind: str, role: str | None = None) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and (role is None or o["metadata"]["labels"]["livelab/role"] == role)]


def shard_pod(objs: list[dict]) -> dict:
    return by_kind(objs, "Job", "shard")[0]["spec"]["template"]["spec"]


# ---- the budget split --------------------------------------------------------------------------------
@pytest.mark.parametrize("total,n,want", [(100, 4, [25, 25, 25, 25]), (10, 3, [4, 3, 3]), (7, 7, [1] * 7),
                                          (11, 4, [3, 3, 3, 2]), (5, 1, [5])])
def test_budget_split_floor_each_remainder_to_lowest(total, n, want):
    got = split_budget(total, n)
    assert got == want and sum(got) == total
    assert max(got) - min(got) <= 1 and got == sorted(got, reverse=True)


@pytest.mark.parametrize("total,n", [(3, 4), (5, 0)])
def test_budget_split_refuses_what_cannot_be_shared(total, n):
    with pytest.raises(LabError):
        split_budget(total, n)


def test_each_index_reads_its_own_share_as_LAB_BUDGET():
    objs = render(endpoint="live", budget=10, completions=3)
    cm = by_kind(objs, "ConfigMap")[0]
    assert cm["data"] == {"shard-0": "4", "shard-1": "3", "shard-2": "3"}
    client = shard_pod(objs)["containers"][0]
    script = unescape(client["command"][2])
    assert 'export LAB_BUDGET="$(cat /etc/livelab/budget/shard-$SHARD)"' in script
    assert {"name": "budget", "mountPath": k8s.BUDGET_DIR, "readOnly": True} in client["volumeMounts"]
    job = by_kind(objs, "Job", "shard")[0]["spec"]
    assert job["backoffLimitPerIndex"] == 0       # a retry would spend a share twice


# ---- generated from the one topology definition ------------------------------------------------------
def image_argv(command: list[str]) -> list[str]:
    """A container's command as the service object wrote it: `$$` back to `$`, the image's python."""
    return [sys.executable if a == "python" else unescape(a) for a in command]


def test_compose_yaml_gives_two_nodes_and_no_commands():
    topo = nodes()
    assert set(topo) == {"endpoint", "client"}
    assert topo["client"].sysctls == {"net.ipv4.tcp_retries2": "15", "net.ipv4.tcp_keepalive_time": "7200"}
    assert topo["client"].cap_add == ["NET_ADMIN"] and topo["endpoint"].cap_add == []


def test_pod_spec_is_composes_client_node_running_the_captures_own_tcpdumps():
    topo = nodes()
    objs = render(tag="v7", registry="ghcr.io/team")
    spec = shard_pod(objs)
    (capture,), (client,) = spec["initContainers"], spec["containers"]
    image = "ghcr.io/team/" + topo["client"].image.split(":", 1)[0] + ":v7"
    assert client["image"] == capture["image"] == image == "ghcr.io/team/livelab-client:v7"
    # the sidecar's lines are the Capture service's, for a node on eth0 writing into the spool
    want = Capture(PodNode("client", host="x", dev="eth0"), pod.SPOOL).commands()
    lines = unescape(capture["command"][2]).splitlines()
    assert lines[-1] == "wait" and len(lines) == len(want) + 1
    for line, (_role, argv, _out, log) in zip(lines, want):
        assert line == f"{shlex.join(argv)} 2>{log} &"
        assert argv[0] == "tcpdump" and argv[argv.index("-w") + 1].startswith(f"{pod.SPOOL}/raw-")
    assert capture["restartPolicy"] == "Always"                   # a native sidecar in the same pod
    assert {s["name"]: s["value"] for s in spec["securityContext"]["sysctls"]} == topo["client"].sysctls
    env = {e["name"]: e.get("value") for e in client["env"]}
    assert env[pod.ENDPOINT_ENV] == "livelab-b1-silent-loss-twin-$(SHARD).livelab-b1-silent-loss-twin:8443"
    assert {"name": "spool", "emptyDir": {}} in spec["volumes"]


def test_the_manifests_follow_the_service_objects(monkeypatch):
    """Generated, not copied: change a service's command line and the manifests change with it."""
    monkeypatch.setattr(Twin, "argv", lambda self: ["twin-from-the-object", "--san", self.node.host])
    monkeypatch.setattr(Capture, "plan", lambda self: [(self.node, "tcpdump-x", ["-i", self.node.dev, "--from-object"], "raw-x.pcap")])
    objs = render()
    (sts,) = by_kind(objs, "StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "twin-from-the-object", "--san", "livelab-b1-silent-loss-twin-$(SHARD).livelab-b1-silent-loss-twin"]
    script = unescape(shard_pod(objs)["initContainers"][0]["command"][2])
    assert "-i eth0 --from-object -w /spool/raw-x.pcap 2>/spool/tcpdump-x.log &" in script


def test_capabilities_are_composes_plus_the_named_runtime_ones_and_nothing_privileged():
    client = nodes()["client"]
    spec = shard_pod(render())
    for c in [*spec["initContainers"], *spec["containers"]]:
        ctx = c["securityContext"]
        assert ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        # both run on the client node: its cap_add, plus what Docker's default set gave it
        assert ctx["capabilities"]["add"] == client.cap_add + k8s.RUNTIME_CAPS[c["name"]]
    assert spec["containers"][0]["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    assert spec["hostNetwork"] is False and spec["hostPID"] is False and spec["hostIPC"] is False


def test_twin_is_the_twin_objects_argv_on_composes_endpoint_in_its_own_pod():
    topo = nodes()
    objs = render()
    spec = shard_pod(objs)
    assert [c["name"] for c in [*spec["initContainers"], *spec["containers"]]] == ["capture", "client"]
    (svc,), (sts,) = by_kind(objs, "Service"), by_kind(objs, "StatefulSet")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert sts["spec"]["replicas"] == 3                            # one twin per index
    (twin,) = sts["spec"]["template"]["spec"]["containers"]
    assert twin["image"] == "livelab-proxy:dev" == topo["endpoint"].image
    host = "livelab-b1-silent-loss-twin-$(SHARD).livelab-b1-silent-loss-twin"
    want = Twin(PodNode("endpoint", host=host), cert_dir="/certs", api_key=TWIN_KEY,
                log_path="/captures/twin.jsonl", t0=None, seed="$(SHARD)").argv()
    assert image_argv(twin["command"]) == want
    assert "--t0" not in want and twin["command"][twin["command"].index("--seed") + 1] == "$(SHARD)"
    run_mount = next(m for m in twin["volumeMounts"] if m["mountPath"] == "/captures")
    assert run_mount["subPathExpr"] == "results/$(BATCH)/shard-$(SHARD)/b1-silent-loss-probe-01"
    assert twin["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_live_batch_has_no_twin_and_takes_the_key_from_a_secret():
    objs = render(endpoint="live", budget=6)
    assert not by_kind(objs, "StatefulSet") and not by_kind(objs, "NetworkPolicy")
    client = shard_pod(objs)["containers"][0]
    key = next(e for e in client["env"] if e["name"] == "GEMINI_API_KEY")
    assert key["valueFrom"]["secretKeyRef"]["name"] == k8s.KEY_SECRET and "value" not in key
    assert pod.ENDPOINT_ENV not in {e["name"] for e in client["env"]}


def test_run_folder_the_pod_spec_names_is_the_one_run_batch_makes(monkeypatch, tmp_path):
    import lab.report
    import lab.run
    made = []
    monkeypatch.setattr(lab.run, "run_one", lambda spec, out=print: made.append(spec.run_dir) or {"pass": True})
    monkeypatch.setattr(lab.report, "summarize", lambda batch: None)
    monkeypatch.setattr(pod, "SPOOL", tmp_path)                     # as inside the pod
    lab.run.run_batch(["b1-silent-loss"], topology="pod", out_dir=tmp_path, out=lambda *_: None)
    plan = k8s.make_plan("b1-silent-loss", 2)
    assert [p.name for p in made] == [plan.run_name]


def test_compose_interpolation_resolves_defaults_and_dollars():
    assert resolve("${RUN_ID:-adhoc}/$$RUN_DIR ${NOPE}|${X-y}") == "adhoc/$RUN_DIR |y"
    assert k8s.k8s_literal('p1=$!; "$(wc -l)"') == 'p1=$$!; "$$(wc -l)"'


# ---- offline validation (kubernetes-validate ships the schemas) -------------------------------------
def validate_all(objs):
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)


@pytest.mark.parametrize("endpoint", ["twin", "live"])
def test_rendered_manifests_validate(endpoint):
    validate_all(render(endpoint=endpoint, budget=12, completions=4))


def test_checked_in_manifests_validate_and_are_current():
    files = sorted(DEPLOY.glob("*.yaml"))
    assert {f.name for f in files} >= {"pvc.yaml", "b1-silent-loss.yaml"}
    for f in files:
        validate_all([o for o in yaml.safe_load_all(f.read_text()) if o])
    fresh = k8s.render(k8s.make_plan("b1-silent-loss", 4, duration=60, budget=100))
    assert list(yaml.safe_load_all((DEPLOY / "b1-silent-loss.yaml").read_text())) == fresh


def test_validation_can_fail():
    objs = render()
    shard_pod(objs)["containers"][0]["securityContext"]["capabilities"]["add"] = "NET_ADMIN"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_all(objs)


# ---- bad input: one line, exit 2, nothing printed on stdout ------------------------------------------
def generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.deploy.kubernetes", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,says", [
    (["--completions", "2", "--scenario", "no-such"], "unknown scenario 'no-such'"),
    (["--completions", "0", "--scenario", "b1-silent-loss"], "--completions must be at least 1"),
    (["--completions", "4", "--scenario", "b1-silent-loss", "--endpoint", "live", "--budget", "3"],
     "cannot give each of 4 shards one"),
    (["--completions", "2", "--scenario", "r2-freeze"], "freeze proxy"),
    (["--completions", "x", "--scenario", "b1-silent-loss"], "invalid int value"),
])
def test_generator_bad_input(args, says):
    out = generate(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr


def test_generator_writes_the_manifests():
    out = generate("--completions", "2", "--scenario", "b1-silent-loss", "--budget", "100")
    assert out.returncode == 0, out.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(out.stdout)]
    assert kinds == ["ConfigMap", "Service", "StatefulSet", "NetworkPolicy", "Job", "Job"]


# ---- the pod's side: the shard entry and the pod topology --------------------------------------------
def test_shard_leaves_its_done_marker_even_on_bad_input(tmp_path, capsys):
    assert shard.main(["no-such-scenario", "--out", str(tmp_path / "shard-0")]) == 2
    assert json.loads((tmp_path / "shard-0" / DONE_MARKER).read_text()) == {"exit": 2}
    assert "unknown scenario" in capsys.readouterr().err


def test_fan_in_job_runs_the_fan_in_in_the_report_image():
    report = by_kind(render(completions=5), "Job", "report")[0]
    (container,) = report["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{k8s.REPORT_IMAGE}:dev"
    argv = container["command"]
    assert argv[:6] == ["python", "-m", "lab.deploy.fan_in", "/captures", "--shards", "5"]
    assert 0 < float(argv[argv.index("--timeout") + 1]) < report["spec"]["activeDeadlineSeconds"]


def test_fan_in_says_how_many_shards_are_done_when_time_is_up(tmp_path, capsys):
    (tmp_path / "shard-0").mkdir()
    (tmp_path / "shard-0" / DONE_MARKER).write_text('{"exit": 0}\n')
    assert fan_in.main([str(tmp_path), "--shards", "2", "--timeout", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lab.deploy.fan_in: 1 of 2 shards done under {tmp_path} after 0 s"]


@pytest.fixture
def in_pod(monkeypatch, tmp_path):
    """This process as the shard's client container: a spool the sidecar listens into, a twin
    Service answering on LAB_ENDPOINT, its CA in the certs mount."""
    spool, certs = tmp_path / "spool", tmp_path / "certs"
    spool.mkdir(), certs.mkdir()
    (certs / "ca.pem").write_text("CA")
    monkeypatch.setattr(pod, "SPOOL", spool)
    monkeypatch.setattr(pod, "CERT_DIR", certs)
    srv = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setenv(pod.ENDPOINT_ENV, f"127.0.0.1:{srv.getsockname()[1]}")
    yield spool
    srv.close()


def sidecar_listens(spool: Path) -> dict[str, bytes]:
    """What the sidecar's two tcpdumps leave in the spool once they listen: their log, their pcap."""
    written = {}
    for role, _argv, out, log in pod.sidecar_capture(spool).commands():
        log.write_text(f"tcpdump: listening on {role}\n")
        written[out.name] = out.name.encode() * 10
        out.write_bytes(written[out.name])
    return written


def test_pod_topology_waits_for_the_sidecar_and_the_twin_then_stands_in_for_them(in_pod, tmp_path):
    written = sidecar_listens(in_pod)
    topo = PodTopology("r", wait_timeout=2)
    topo.up()
    assert topo.client.ip and topo.endpoint.ip == "127.0.0.1" and topo.ca_path == pod.CERT_DIR / "ca.pem"
    # the run's own service objects, started on the pod's nodes as run_one starts them
    twin = Twin(topo.endpoint, cert_dir=topo.cert_dir, api_key="k", log_path=tmp_path / "twin.jsonl", t0=1.0,
                seed=1, port=topo.endpoint_port).start()   # the run's own deadline: a loaded machine starts a twin slowly
    assert twin.base_url == f"https://127.0.0.1:{topo.endpoint_port}"
    twin.stop()
    assert twin.proc.returncode == 0
    run = tmp_path / "run"
    capture = Capture(topo.client, run).start()
    assert "listening on" in (run / "tcpdump-eth.log").read_text()
    raw = capture.stop()
    assert {p.name: p.read_bytes() for p in raw} == written       # the spool, copied into the run
    with pytest.raises(LabError, match="runs no proxy"):
        topo.endpoint.popen(["lab", "proxy"], role="proxy")
    agent = topo.client.popen([sys.executable, "-c", "print('local')"], role="agent", stdout=subprocess.PIPE, text=True)
    assert agent.communicate()[0] == "local\n"                   # anything else runs right here
    left = topo.client.popen(["sleep", "60"], role="left-running")
    topo.down()
    assert left.poll() is not None                                 # down() ends what a run left


def test_pod_topology_says_what_it_waits_for(in_pod, monkeypatch):
    with pytest.raises(CapabilityError, match="capture sidecar is not ready after 0 s: .*tcpdump-eth.log"):
        PodTopology("r", wait_timeout=0.2).up()
    sidecar_listens(in_pod)
    monkeypatch.setenv(pod.ENDPOINT_ENV, "127.0.0.1:1")
    with pytest.raises(CapabilityError, match="twin is not ready after 0 s: 127.0.0.1:1"):
        PodTopology("r", wait_timeout=0.2).up()


def test_pod_topology_refuses_to_run_outside_its_pod(monkeypatch, tmp_path):
    monkeypatch.setattr(pod, "SPOOL", tmp_path / "nowhere")
    with pytest.raises(CapabilityError, match="only inside the pod .* use --topology netns or compose"):
        PodTopology.preflight()


# ---- the GitHub Actions fan-out ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def wf():
    return yaml.safe_load(FANOUT.read_text())


def lint_workflow(path: Path) -> subprocess.CompletedProcess:
    """check-jsonschema against the GitHub workflow schema it ships, as test_workflow.py lints nightly.yml."""
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True)


def test_fanout_schema_valid_and_the_lint_can_fail(tmp_path):
    out = lint_workflow(FANOUT)
    assert out.returncode == 0, out.stdout + out.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(FANOUT.read_text().replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest"))
    assert lint_workflow(broken).returncode != 0


def test_fanout_inputs_matrix_and_fan_in(wf):
    on = wf.get("on", wf.get(True))            # PyYAML reads the bare key `on` as True
    assert set(on["workflow_dispatch"]["inputs"]) >= {"scenarios", "runs", "endpoint"}
    assert on["workflow_dispatch"]["inputs"]["endpoint"]["options"] == ["twin", "live"]
    jobs = wf["jobs"]
    assert "lab.deploy.ci_matrix" in jobs["plan"]["steps"][-1]["run"]
    assert jobs["shard"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    runs = " ".join(s.get("run", "") for s in jobs["shard"]["steps"])
    makefile = (ROOT / "Makefile").read_text()
    for target in ("setup", "lab-run", "down"):
        assert f"make {target}" in runs and f"\n{target}:" in makefile
    assert "BUDGET=${{ matrix.budget }}" in runs
    upload = next(s for s in jobs["shard"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    scan = next(s for s in jobs["shard"]["steps"] if s.get("id") == "scan")
    assert "lab scan captures" in scan["run"] and "inputs.endpoint == 'live'" in scan["if"]
    assert "inputs.endpoint == 'twin' || steps.scan.outcome == 'success'" in upload["if"]
    report = jobs["report"]
    assert "shard" in report["needs"]
    dl = next(s for s in report["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
    assert dl["with"]["pattern"] == "shard-*"
    assert any(s.get("run", "").startswith(".venv/bin/lab report " + dl["with"]["path"]) for s in report["steps"])


def test_matrix_shards_and_budget_shares():
    cells = matrix.shards(["b1-silent-loss", "b2-path-return"], 2, budget=11)
    assert [(c["index"], c["scenario"], c["budget"]) for c in cells] == [
        (0, "b1-silent-loss", "3"), (1, "b1-silent-loss", "3"), (2, "b2-path-return", "3"), (3, "b2-path-return", "2")]
    assert all(c["budget"] == "" for c in matrix.shards(["control"], 3))
    for bad in ((["no-such"], 1, None), (["control"], 0, None), (["control"], 3, 2), (["control"], 257, None)):
        with pytest.raises(LabError):
            matrix.shards(*bad)
