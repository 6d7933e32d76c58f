"""The Indexed Job's pod spec run locally through the same containers, since there is no cluster here.

The rendered manifests (lab.deploy.kubernetes) are played with `docker run`, the way a kubelet would
play them: each pod's containers share one network namespace (held by a pause container carrying
the pod's sysctls), the capture sidecar starts and passes its startup probe before the client, the
twin of each index is a container of its own on an internal network under its Service name, the
claim is a host folder with each mount's subPathExpr, an emptyDir a folder per pod, the budget
ConfigMap a folder of files. Commands, environment, capabilities and mounts come from the manifests,
expanded as the kubelet expands $(VAR) and `$$`. Two indexes of B1 run at once in the client image
(no tshark, no matplotlib); each must pass, with its raw captures holding the dropped packets; then
the fan-in job, in the report image, merges each run's capture.pcapng and both shards into one summary.
"""
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lab.deploy import kubernetes as k8s
from lab.deploy.shards import DONE_MARKER
from lab.topology.compose import REPO
from tests.e2e.docker_needed import docker_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TAG = os.environ.get("LAB_IMAGE_TAG", "dev")
DURATION = 25  # B1 holds at 25 s (every resume refused while the booking commits), as test_compose_scenario runs it
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) -> its value (left as is when unknown), `$$` -> `$`: the kubelet's rule for command and env."""
    return _REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {r.stderr.strip()[-400:]}")
    return r


class LocalKubelet:
    """Just enough of a kubelet to run these manifests' pods with `docker run`."""

    def __init__(self, root: Path, prefix: str):
        self.root, self.prefix, self.names = root, prefix, []
        self.network = f"{prefix}-net"
        docker("network", "create", "--internal", self.network)

    def _env(self, container: dict, index: int) -> dict[str, str]:
        env: dict[str, str] = {}
        for e in container.get("env", []):
            env[e["name"]] = str(index) if "fieldRef" in e.get("valueFrom", {}) else \
                kubelet_expand(e.get("value", ""), env)
        return env

    def _argv(self, container: dict, pod: dict, index: int, name: str, configmaps: dict) -> list[str]:
        env = self._env(container, index)
        argv = ["run", "-d", "--name", name, "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        ctx = container["securityContext"]
        assert ctx["privileged"] is False
        for cap in ctx["capabilities"].get("add", []):
            argv += ["--cap-add", cap]
        for k, v in env.items():
            argv += ["-e", f"{k}={v}"]
        vols = {v["name"]: v for v in pod["volumes"]}
        for m in container.get("volumeMounts", []):
            vol = vols[m["name"]]
            if "persistentVolumeClaim" in vol:
                host = self.root / "claims" / vol["persistentVolumeClaim"]["claimName"] / kubelet_expand(m["subPathExpr"], env)
                host.mkdir(parents=True, exist_ok=True)
            elif "emptyDir" in vol:             # lives as long as its pod: a folder per pod and index
                host = self.root / "emptydirs" / f"{id(pod)}-{index}" / m["name"]
                host.mkdir(parents=True, exist_ok=True)
            else:
                host = configmaps[vol["configMap"]["name"]]
            argv += ["-v", f"{host}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"]
        return [*argv, container["image"], *[kubelet_expand(a, env) for a in container["command"]]]

    def start(self, container: dict, pod: dict, index: int, name: str, configmaps: dict, net: list[str]) -> str:
        name = f"{self.prefix}-{name}"
        self.names.append(name)
        argv = self._argv(container, pod, index, name, configmaps)
        docker(*argv[:2], *net, *argv[2:])
        return name

    def wait_probe(self, name: str, probe: dict, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if docker("exec", name, *probe["exec"]["command"], check=False, timeout=30).returncode == 0:
                return
            time.sleep(probe.get("periodSeconds", 1))
        raise AssertionError(f"{name}: probe never passed; logs: {docker('logs', name, check=False).stderr[-400:]}")

    def pause(self, pod: dict, index: int) -> str:
        """The pod's network namespace, with the pod's sysctls (Kubernetes' pause container)."""
        name = f"{self.prefix}-pod-{index}"
        self.names.append(name)
        sysctls = [a for s in pod["securityContext"]["sysctls"] for a in ("--sysctl", f"{s['name']}={s['value']}")]
        image = pod["containers"][0]["image"]
        docker("run", "-d", "--name", name, "--network", self.network, "--cap-drop", "ALL", *sysctls,
               image, "sleep", "infinity")
        return name

    def wait_exit(self, name: str, timeout: float) -> int:
        return int(docker("wait", name, timeout=timeout).stdout.strip())

    def cleanup(self) -> None:
        for n in reversed(self.names):
            docker("rm", "-f", n, check=False, timeout=60)
        docker("network", "rm", self.network, check=False, timeout=60)


@pytest.fixture(scope="module")
def tag(tmp_path_factory):
    """compose.yaml's client and network-side images at LAB_IMAGE_TAG (the twin's pod runs the
    endpoint's), and the fan-in's report image on top of the client's
    (deploy/kubernetes/Dockerfile.report, matplotlib from a wheels/ folder: the offline path)."""
    docker_or_skip()                        # and the wheelhouse the image installs the project from, fresh
    r = subprocess.run(["docker", "compose", "-p", "livelab-k8s-image", "build", "client", "endpoint"], cwd=REPO,
                       env={**os.environ, "LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"},
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.skip(f"cannot build the lab images at {TAG} (run scripts/docker-setup.sh): {r.stderr.strip()[-200:]}")
    ctx = tmp_path_factory.mktemp("report-image")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(ctx / "wheels"), "matplotlib>=3.8"],
                   check=True, capture_output=True, timeout=600)
    docker("build", "-q", "-f", str(REPO / "deploy" / "kubernetes" / "Dockerfile.report"),
           "--build-arg", f"IMAGE=livelab-client:{TAG}", "-t", f"{k8s.REPORT_IMAGE}:{TAG}", str(ctx), timeout=900)
    return TAG


def test_two_indexes_of_b1_pass_through_the_pod_spec_and_merge(tag, tmp_path):
    plan = k8s.make_plan("b1-silent-loss", 2, duration=DURATION, budget=10, tag=tag,
                         name=f"ll-k8s-{uuid.uuid4().hex[:6]}")
    objs = {(o["kind"], o["metadata"]["name"]): o for o in k8s.render(plan)}
    job = objs[("Job", plan.name)]["spec"]
    pod = job["template"]["spec"]
    twin_pod = objs[("StatefulSet", f"{plan.name}-twin")]["spec"]["template"]["spec"]
    report_pod = objs[("Job", f"{plan.name}-report")]["spec"]["template"]["spec"]
    cm = objs[("ConfigMap", f"{plan.name}-budget")]
    cm_dir = tmp_path / "configmaps" / cm["metadata"]["name"]
    cm_dir.mkdir(parents=True)
    for k, v in cm["data"].items():
        (cm_dir / k).write_text(v)
    configmaps = {cm["metadata"]["name"]: cm_dir}
    kubelet = LocalKubelet(tmp_path, plan.name)
    try:
        (twin,) = twin_pod["containers"]
        twins = []
        for i in range(job["completions"]):
            alias = f"{plan.name}-twin-{i}.{plan.name}-twin"
            twins.append(kubelet.start(twin, twin_pod, i, f"twin-{i}", configmaps,
                                       ["--network", kubelet.network, "--network-alias", alias]))
        for t in twins:
            kubelet.wait_probe(t, twin["readinessProbe"])
        clients = []
        for i in range(job["completions"]):
            ns = ["--network", f"container:{kubelet.pause(pod, i)}"]
            (capture,) = pod["initContainers"]
            cap = kubelet.start(capture, pod, i, f"capture-{i}", configmaps, ns)
            kubelet.wait_probe(cap, capture["startupProbe"])
            clients.append((kubelet.start(pod["containers"][0], pod, i, f"client-{i}", configmaps, ns), cap))
        for client, cap in clients:
            rc = kubelet.wait_exit(client, timeout=DURATION + 300)
            logs = docker("logs", client, check=False)
            assert rc == 0, (logs.stdout + logs.stderr)[-1500:]
            docker("stop", "-t", "5", cap, check=False)          # what Kubernetes does to a native sidecar
        results = tmp_path / "claims" / plan.claim / "results" / plan.name
        runs = [results / f"shard-{i}" / plan.run_name for i in range(job["completions"])]
        for i, run in enumerate(runs):
            assert (results / f"shard-{i}" / DONE_MARKER).read_text().strip() == '{"exit": 0}'
            assert (run / "verdict.json").is_file() and (run / "twin.jsonl").is_file()
            # the sidecar's spool, copied in; merging it is the fan-in's (the client image has no mergecap)
            assert (run / "raw-nflog.pcap").stat().st_size > 24, "no dropped packet in the capture"
            assert not (run / "capture.pcapng").exists()
        rep = kubelet.start(report_pod["containers"][0], report_pod, 0, "report", configmaps,
                            ["--network", "none"])
        assert kubelet.wait_exit(rep, timeout=300) == 0, docker("logs", rep, check=False).stdout[-1500:]
        for run in runs:
            assert (run / "capture.pcapng").stat().st_size > 0 and (run / "timeline.png").is_file()
        summary = (results / "summary.md").read_text()
        assert "2 runs in 1 scenarios, 0 passed for the user; 2 of 2 with reproduction rows reproduce the study" in summary, summary[:800]
        for i in range(job["completions"]):
            assert f"| shard-{i}/{plan.run_name} | b1-silent-loss | probe | FAIL | yes (held to) |" in summary
    finally:
        kubelet.cleanup()
