"""Kubernetes manifests for a batch fanned out as an Indexed Job, from the lab's one topology definition.

    python -m lab.deploy.kubernetes --completions 4 --scenario b1-silent-loss --budget 100 > job.yaml
    kubectl apply -f deploy/kubernetes/pvc.yaml -f job.yaml

Nothing is written twice: images, capabilities and sysctls are compose.yaml's two nodes'
(lab.deploy.compose_file), and every container's command line is the one its service object gives
(lab/topology/services.py), as in the netns and Compose topologies. One completion index = one lab
run, whose pod holds:

  client    compose.yaml's client node (its image, NET_ADMIN, its sysctls for the pod's namespace)
            running `python -m lab.deploy.shard`: `lab run`'s batch code with the `pod` topology
            (lab/topology/pod.py), whose client node is this container.
  capture   a native sidecar in the same network namespace running the Capture's own two tcpdumps
            (Capture.commands()), into an emptyDir spool the client copies each run's pcaps from.

The twin is NOT in that pod: Twin.argv() runs in a pod of its own per index (compose.yaml's endpoint
node) behind a headless Service, the pod topology's endpoint node. On the pod's loopback it would
share the client's kernel: the client's sysctls (tcp_retries2, the timer that decides when the server
lets go of the old connection) would be the twin's too, the fault rules in the namespace would drop
the twin's own retransmissions before they left its socket, and eth0 (what the capture records)
would carry nothing; the silent-loss signature is the server's kernel holding a connection whose
packets vanished on the path, so the twin needs its own kernel namespace across a real link.

Results go to a ReadWriteMany claim: results/<name>/shard-<i>/<run>/ per index, the twin's CA under
certs/<name>/shard-<i>/ (outside the results). A shard leaves raw captures and its verdict; the fan-in
Job (lab.deploy.fan_in, in the report image: the client image plus tshark and matplotlib) waits for
every shard's DONE_MARKER, merges each capture.pcapng and runs `lab report` over results/<name>. A live
batch's session budget is split across the indexes (lab.deploy.shards.split_budget) into a ConfigMap;
each pod exports its own share as LAB_BUDGET.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass

import yaml

from lab import scenario as scenario_mod
from lab.deploy.compose_file import NodeSpec, nodes
from lab.deploy.shards import shard_name, split_budget
from lab.errors import LabError
from lab.live.budget import DEFAULT_BATCH
from lab.run import TWIN_KEY
from lab.topology import pod
from lab.topology.base import Topology
from lab.topology.services import Twin

RESULTS = "/captures"            # compose.yaml mounts the results here; the pods keep the path
BUDGET_DIR = "/etc/livelab/budget"
TWIN_PORT = Topology.endpoint_port
KEY_SECRET = "livelab-gemini"    # live mode: a Secret with GEMINI_API_KEY
REPORT_IMAGE = "livelab-report"  # deploy/kubernetes/Dockerfile.report: the client image + tshark, matplotlib
SHARD = "$(SHARD)"               # the index, filled in by Kubernetes in commands and env values
# where a pod reads its index (SHARD): an Indexed Job's pod annotation, a StatefulSet pod's label
JOB_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
STATEFUL_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")   # a DNS label, leaving room for -twin-<i>
# Capabilities beyond compose.yaml's cap_add. Docker grants a default set that a Kubernetes pod here
# drops (drop: ALL); these are the ones the lab uses from it. NET_RAW: iptables-legacy and tcpdump
# open raw sockets. SETUID/SETGID: `tcpdump -Z root` changes to root's user and groups.
RUNTIME_CAPS = {"client": ["NET_RAW"], "capture": ["NET_RAW", "SETUID", "SETGID"]}


@dataclass(frozen=True)
class Plan:
    """One batch to render; `budget` is the per-index share (None: no live budget)."""
    name: str
    scenario: str
    client: str
    run_name: str
    completions: int
    parallelism: int
    endpoint: str
    duration: float
    budget: list[int] | None
    tag: str
    registry: str
    claim: str


def make_plan(scenario: str, completions: int, endpoint: str = "twin", budget: int | None = None,
              client: str | None = None, duration: float | None = None, tag: str = "dev", registry: str = "",
              name: str | None = None, parallelism: int | None = None, claim: str = "livelab-results") -> Plan:
    """Check every input (one LabError on the first problem) and fix what the manifests say."""
    if completions < 1:
        raise LabError(f"--completions must be at least 1, got {completions}")
    if parallelism is not None and parallelism < 1:
        raise LabError(f"--parallelism must be at least 1, got {parallelism}")
    if endpoint not in ("twin", "live"):
        raise LabError(f"unknown endpoint {endpoint!r}; use twin or live")
    scn = scenario_mod.load(scenario)
    if scn.endpoint.get("via") == "proxy":
        raise LabError(f"{scn.name} goes through the freeze proxy, which the Kubernetes pod does not have; "
                       "run it with --topology netns or compose")
    if duration is not None and duration <= 0:
        raise LabError(f"--duration must be positive, got {duration:g}")
    if endpoint == "live" and budget is None:
        budget = DEFAULT_BATCH
    name = name or f"livelab-{scn.name}"[:40].rstrip("-")
    if not _NAME.match(name):
        raise LabError(f"--name {name!r} is not a DNS label of at most 40 characters (a-z, 0-9, -)")
    cl = client or scn.client
    return Plan(name=name, scenario=scn.name, client=cl,
                run_name=f"{scn.name}-{cl}-01",     # lab.run.run_batch's folder for run 1 of 1
                completions=completions, parallelism=min(parallelism or completions, completions),
                endpoint=endpoint, duration=float(duration or scn.duration),
                budget=split_budget(budget, completions) if budget is not None else None,
                tag=tag, registry=registry, claim=claim)


# ---- pieces ----------------------------------------------------------------------------------------
def k8s_literal(text: str) -> str:
    """Text for a container's command or env value: Kubernetes expands $(VAR) there, `$$` is a `$`."""
    return text.replace("$", "$$")


def in_image(argv: list[str]) -> list[str]:
    """A service's command line as a container runs it: the image's python for this one's, every
    `$` literal but the index (SHARD)."""
    argv = ["python" if a == sys.executable else a for a in argv]
    return [k8s_literal(a).replace(k8s_literal(SHARD), SHARD) for a in argv]


def _image(compose_image: str, plan: Plan) -> str:
    # the name before the tag: compose.yaml's tags are variables (`${LAB_IMAGE_TAG:-dev}`, a framework
    # suffix after it), whose own colons must not be taken for the tag's
    repo = compose_image.split(":", 1)[0]
    return f"{plan.registry.rstrip('/')}/{repo}:{plan.tag}" if plan.registry else f"{repo}:{plan.tag}"


def _labels(plan: Plan, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "livelab", "livelab/batch": plan.name, "livelab/role": role}


def _security(caps: list[str] = ()) -> dict:
    """Nothing but `caps`: every other capability dropped, not privileged, no privilege escalation."""
    caps = list(dict.fromkeys(caps))
    ctx: dict = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if caps:
        ctx["capabilities"]["add"] = caps
    return ctx


def _index_env(plan: Plan, index_field: str) -> list[dict]:
    return [{"name": "SHARD", "valueFrom": {"fieldRef": {"fieldPath": index_field}}},
            {"name": "BATCH", "value": plan.name}]


def _probe(argv: list[str], period: int = 1, failures: int = 60) -> dict:
    return {"exec": {"command": in_image(argv)}, "periodSeconds": period, "failureThreshold": failures}


def _twin_host(plan: Plan) -> str:
    return f"{plan.name}-twin-{SHARD}.{plan.name}-twin"


def _results_volume(plan: Plan) -> dict:
    return {"name": "results", "persistentVolumeClaim": {"claimName": plan.claim}}


def _results_mount() -> dict:
    return {"name": "results", "mountPath": RESULTS, "subPathExpr": "results/$(BATCH)"}


def _certs_mount(read_only: bool) -> dict:
    return {"name": "results", "mountPath": str(pod.CERT_DIR), "subPathExpr": f"certs/$(BATCH)/shard-{SHARD}",
            "readOnly": read_only}


def _spool_mount(read_only: bool) -> dict:
    return {"name": "spool", "mountPath": str(pod.SPOOL), "readOnly": read_only}


def _pod_basics() -> dict:
    # said explicitly, so a reader (and the test) sees what the pod does not get
    return {"hostNetwork": False, "hostPID": False, "hostIPC": False, "automountServiceAccountToken": False}


def twin_service(plan: Plan) -> Twin:
    """The Twin a twin pod runs: the one run_one would start, with what only the pod spec knows (its
    Service name, a seed per index, no run clock yet: t0=None)."""
    return Twin(pod.PodNode("endpoint", host=_twin_host(plan)), cert_dir=pod.CERT_DIR, api_key=TWIN_KEY,
                log_path=f"{RESULTS}/twin.jsonl", t0=None, seed=SHARD, port=TWIN_PORT)


def capture_script() -> str:
    """The sidecar's shell: each of the Capture's tcpdump command lines, its stderr to its log, at once."""
    lines = [f"{shlex.join(argv)} 2>{shlex.quote(str(log))} &" for _role, argv, _out, log in pod.sidecar_capture().commands()]
    return "\n".join([*lines, "wait"])


# ---- objects ---------------------------------------------------------------------------------------
def capture_container(plan: Plan, node: NodeSpec) -> dict:
    # a native sidecar (init container that keeps running): it starts, and is listening, before the
    # client, and Kubernetes stops it after the client ends, so the Job completes. It is the client
    # node's capture: the client's image and capabilities, plus what tcpdump needs beyond them.
    logs = [str(log) for _role, _argv, _out, log in pod.sidecar_capture().commands()]
    return {"name": "capture", "image": _image(node.image, plan), "imagePullPolicy": "IfNotPresent",
            "restartPolicy": "Always", "command": ["sh", "-c", k8s_literal(capture_script())],
            "securityContext": _security([*node.cap_add, *RUNTIME_CAPS["capture"]]),
            "startupProbe": _probe([*pod.STANDIN, "capture", *logs]),
            "volumeMounts": [_spool_mount(read_only=False)]}


def client_container(plan: Plan, node: NodeSpec) -> dict:
    shard_cmd = (f"exec python -m lab.deploy.shard {shlex.quote(plan.scenario)} --out \"{RESULTS}/shard-$SHARD\" "
                 f"--client {shlex.quote(plan.client)} --endpoint {plan.endpoint} --duration {plan.duration:g}")
    if plan.budget is not None:
        shard_cmd = f"export LAB_BUDGET=\"$(cat {BUDGET_DIR}/shard-$SHARD)\"\n{shard_cmd}"
    env = _index_env(plan, JOB_INDEX)
    mounts = [_results_mount(), _spool_mount(read_only=True)]
    if plan.endpoint == "twin":
        env.append({"name": pod.ENDPOINT_ENV, "value": f"{_twin_host(plan)}:{TWIN_PORT}"})
        mounts.append(_certs_mount(read_only=True))
    else:
        env.append({"name": "GEMINI_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": KEY_SECRET, "key": "GEMINI_API_KEY"}}})
    if plan.budget is not None:
        mounts.append({"name": "budget", "mountPath": BUDGET_DIR, "readOnly": True})
    return {"name": "client", "image": _image(node.image, plan), "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", k8s_literal(shard_cmd)], "env": env,
            "securityContext": _security([*node.cap_add, *RUNTIME_CAPS["client"]]), "volumeMounts": mounts}


def shard_job(plan: Plan, topo: dict[str, NodeSpec]) -> dict:
    client = topo["client"]
    volumes = [_results_volume(plan), {"name": "spool", "emptyDir": {}}]
    if plan.budget is not None:
        volumes.append({"name": "budget", "configMap": {"name": f"{plan.name}-budget"}})
    pod_spec = {**_pod_basics(), "restartPolicy": "Never",
                # compose.yaml's client sysctls, for the pod's one network namespace; tcp_retries2 is not
                # on the kubelet's safe list: nodes need --allowed-unsafe-sysctls=net.ipv4.tcp_retries2
                "securityContext": {"sysctls": [{"name": k, "value": v} for k, v in client.sysctls.items()]},
                "initContainers": [capture_container(plan, client)], "containers": [client_container(plan, client)],
                "volumes": volumes}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": plan.name, "labels": _labels(plan, "shard")},
            "spec": {"completionMode": "Indexed", "completions": plan.completions, "parallelism": plan.parallelism,
                     # one try per index: a retry would open live sessions a second time, over its share
                     "backoffLimitPerIndex": 0, "maxFailedIndexes": plan.completions,
                     "template": {"metadata": {"labels": _labels(plan, "shard")}, "spec": pod_spec}}}


def twin_objects(plan: Plan, topo: dict[str, NodeSpec]) -> list[dict]:
    """A headless Service and a StatefulSet: twin <i> answers at <name>-twin-<i>.<name>-twin."""
    ep = topo["endpoint"]
    sel = _labels(plan, "twin")
    twin = twin_service(plan)
    # the twin's pod sees only its run's folder, at /captures (a subPath the kubelet makes if it is
    # missing): the twin writes twin.jsonl there before the shard has made the folder
    run_mount = {"name": "results", "mountPath": RESULTS,
                 "subPathExpr": f"results/$(BATCH)/{shard_name(SHARD)}/{plan.run_name}"}
    container = {"name": "twin", "image": _image(ep.image, plan), "imagePullPolicy": "IfNotPresent",
                 "command": in_image(twin.argv()), "env": _index_env(plan, STATEFUL_INDEX),
                 "ports": [{"containerPort": TWIN_PORT, "name": "twin"}],
                 "securityContext": _security(ep.cap_add),
                 "readinessProbe": _probe([*pod.STANDIN, "twin", "127.0.0.1", str(TWIN_PORT),
                                           str(pod.CERT_DIR / "ca.pem")], failures=3),
                 "volumeMounts": [run_mount, _certs_mount(read_only=False)]}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{plan.name}-twin", "labels": sel},
               "spec": {"clusterIP": "None", "selector": sel, "ports": [{"name": "twin", "port": TWIN_PORT}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": f"{plan.name}-twin", "labels": sel},
           "spec": {"serviceName": f"{plan.name}-twin", "replicas": plan.completions,
                    "podManagementPolicy": "Parallel", "selector": {"matchLabels": sel},
                    "template": {"metadata": {"labels": sel},
                                 "spec": {**_pod_basics(), "containers": [container],
                                          "volumes": [_results_volume(plan)]}}}}
    return [service, sts]


def isolation_policy(plan: Plan) -> dict:
    """compose.yaml's `internal: true`: a twin run's pods reach their twins and DNS, nothing else."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{plan.name}-internal", "labels": _labels(plan, "shard")},
            "spec": {"podSelector": {"matchLabels": _labels(plan, "shard")}, "policyTypes": ["Egress"],
                     "egress": [{"to": [{"podSelector": {"matchLabels": _labels(plan, "twin")}}],
                                 "ports": [{"protocol": "TCP", "port": TWIN_PORT}]},
                                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}}


def budget_map(plan: Plan) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{plan.name}-budget", "labels": _labels(plan, "shard")},
            "data": {shard_name(i): str(b) for i, b in enumerate(plan.budget or [])}}


def fan_in_job(plan: Plan, wait_s: int | None = None) -> dict:
    """Waits until every index left its DONE_MARKER, then finalizes and reports all shard folders."""
    wait_s = wait_s or int(plan.duration) + 3600        # the runs, plus image pulls and start-up
    argv = ["python", "-m", "lab.deploy.fan_in", RESULTS, "--shards", str(plan.completions),
            "--timeout", str(wait_s - 60)]               # its own deadline first: one line, not a kill
    container = {"name": "report", "image": _image(f"{REPORT_IMAGE}:", plan), "imagePullPolicy": "IfNotPresent",
                 "command": in_image(argv), "env": [{"name": "BATCH", "value": plan.name}],
                 "securityContext": _security(), "volumeMounts": [_results_mount()]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{plan.name}-report", "labels": _labels(plan, "report")},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": wait_s,
                     "template": {"metadata": {"labels": _labels(plan, "report")},
                                  "spec": {**_pod_basics(), "restartPolicy": "Never", "containers": [container],
                                           "volumes": [_results_volume(plan)]}}}}


def render(plan: Plan, topo: dict[str, NodeSpec] | None = None) -> list[dict]:
    """Every object of the batch, in the order `kubectl apply` should create them."""
    topo = topo or nodes()
    objs: list[dict] = []
    if plan.budget is not None:
        objs.append(budget_map(plan))
    if plan.endpoint == "twin":
        objs += [*twin_objects(plan, topo), isolation_policy(plan)]
    return [*objs, shard_job(plan, topo), fan_in_job(plan)]


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:      # no &id001 anchors: a manifest a reader can follow
        return True


def dump(objs: list[dict]) -> str:
    return yaml.dump_all(objs, Dumper=_PlainDumper, sort_keys=False, width=120)


# ---- CLI -------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):          # one line, exit 2 (argparse would print the usage too)
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m lab.deploy.kubernetes", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, help="a scenario name (lab list) or file")
    p.add_argument("--completions", type=int, required=True, help="indexes: one lab run each")
    p.add_argument("--parallelism", type=int, default=None, help="indexes running at once (default: all)")
    p.add_argument("--endpoint", default="twin", choices=["twin", "live"])
    p.add_argument("--budget", type=int, default=None,
                   help=f"live sessions for the whole batch, split across indexes (live default {DEFAULT_BATCH})")
    p.add_argument("--client", default=None, help="the client under test (default: the scenario's)")
    p.add_argument("--duration", type=float, default=None, help="seconds per run (default: the scenario's)")
    p.add_argument("--tag", default="dev", help="tag of the livelab-client image (compose.yaml's LAB_IMAGE_TAG)")
    p.add_argument("--registry", default="", help="registry prefix of the images, e.g. ghcr.io/you")
    p.add_argument("--name", default=None, help="name of the batch's objects (default livelab-<scenario>)")
    p.add_argument("--claim", default="livelab-results", help="the ReadWriteMany claim (deploy/kubernetes/pvc.yaml)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = make_plan(args.scenario, args.completions, endpoint=args.endpoint, budget=args.budget,
                         client=args.client, duration=args.duration, tag=args.tag, registry=args.registry,
                         name=args.name, parallelism=args.parallelism, claim=args.claim)
        text = dump(render(plan))
    except LabError as e:
        print(f"lab.deploy.kubernetes: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
