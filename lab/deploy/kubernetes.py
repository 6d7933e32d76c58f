"""Kubernetes manifests for a batch fanned out as an Indexed Job, rendered from compose.yaml.

    python -m lab.deploy.kubernetes --completions 4 --scenario b1-silent-loss --budget 100 > job.yaml
    kubectl apply -f deploy/kubernetes/pvc.yaml -f job.yaml

One completion index = one lab run. Its pod holds the `client` container (compose.yaml's client:
image, capabilities, sysctls, environment; the run itself is `python -m lab.deploy.shard`) and the
`capture` sidecar (compose.yaml's capture command) in the pod's one network namespace. The twin is
NOT in that pod: it runs in a pod of its own (compose.yaml's endpoint command), one per index, behind
a headless Service. A twin on the pod's loopback would share the client's kernel: the client's
sysctls (tcp_retries2, the timer that decides when the server lets go of the old connection) would
be the twin's too, the fault rules in the namespace would drop the twin's own retransmissions before
they left its socket, and eth0 (what the capture records) would carry nothing; the silent-loss
signature is the server's kernel holding a connection whose packets vanished on the path, so the
twin needs its own kernel namespace across a real link, as in the netns and Compose topologies.

Results go to a ReadWriteMany claim: results/<name>/shard-<i>/<run>/ per index, the twin's CA under
certs/<name>/shard-<i>/ (outside the results); a fan-in Job waits for every shard's DONE_MARKER and
runs `lab report` over results/<name>. A live batch's session budget is split across the indexes
(lab.deploy.shards.split_budget) into a ConfigMap; each pod exports its own share as LAB_BUDGET.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass

import yaml

from lab import scenario as scenario_mod
from lab.deploy.compose_file import Service, services
from lab.deploy.shards import DONE_MARKER, shard_name, split_budget
from lab.errors import LabError
from lab.live.budget import DEFAULT_BATCH
from lab.run import TWIN_KEY

RESULTS = "/captures"            # compose.yaml mounts the results here; the pod keeps the path
CERTS = "/certs"                 # and the twin's CA here
BUDGET_DIR = "/etc/livelab/budget"
TWIN_PORT = 8443
KEY_SECRET = "livelab-gemini"    # live mode: a Secret with GEMINI_API_KEY
# where a pod reads its index (SHARD): an Indexed Job's pod annotation, a StatefulSet pod's label
JOB_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
STATEFUL_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")   # a DNS label, leaving room for -twin-<i>
# Capabilities beyond compose.yaml's cap_add. Docker grants a default set that a Kubernetes pod here
# drops (drop: ALL); these are the ones the lab uses from it. NET_RAW: iptables-legacy opens a raw
# socket. SETUID/SETGID: `tcpdump -Z root` changes to root's user and groups (fails without them).
RUNTIME_CAPS = {"client": ["NET_RAW"], "capture": ["SETUID", "SETGID"]}


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


def _image(compose_image: str, plan: Plan) -> str:
    repo = compose_image.rsplit(":", 1)[0]
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


def _env(values: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _shard_env(index_field: str) -> dict:
    return {"name": "SHARD", "valueFrom": {"fieldRef": {"fieldPath": index_field}}}


def _probe(svc: Service, period: int = 1, failures: int = 60) -> dict:
    return {"exec": {"command": svc.health}, "periodSeconds": period, "failureThreshold": failures}


def _twin_host(plan: Plan, shard: str) -> str:
    return f"{plan.name}-twin-{shard}.{plan.name}-twin"


def _run_dir(plan: Plan) -> str:
    return f"{RESULTS}/{shard_name('$(SHARD)')}/{plan.run_name}"    # $(SHARD): filled in by Kubernetes


def _results_volume(plan: Plan) -> dict:
    return {"name": "results", "persistentVolumeClaim": {"claimName": plan.claim}}


def _results_mount(read_only: bool = False) -> dict:
    return {"name": "results", "mountPath": RESULTS, "subPathExpr": "results/$(BATCH)", "readOnly": read_only}


def _certs_mount(read_only: bool) -> dict:
    return {"name": "results", "mountPath": CERTS, "subPathExpr": "certs/$(BATCH)/shard-$(SHARD)",
            "readOnly": read_only}


def _pod_basics() -> dict:
    # said explicitly, so a reader (and the test) sees what the pod does not get
    return {"hostNetwork": False, "hostPID": False, "hostIPC": False, "automountServiceAccountToken": False}


# ---- objects ---------------------------------------------------------------------------------------
def capture_container(plan: Plan, svcs: dict[str, Service]) -> dict:
    cap = svcs["capture"]
    # a native sidecar (init container that keeps running): it starts, and is healthy, before the
    # client, and Kubernetes stops it after the client ends, so the Job completes. Its image is the
    # client's: compose.yaml's capture uses the local base image, which the client image is built on.
    return {"name": "capture", "image": _image(svcs["client"].image, plan), "imagePullPolicy": "IfNotPresent",
            "restartPolicy": "Always", "command": [k8s_literal(a) for a in cap.command],
            "env": [_shard_env(JOB_INDEX), {"name": "BATCH", "value": plan.name},
                    *_env({**cap.environment, "RUN_DIR": _run_dir(plan)})],
            "securityContext": _security([*cap.cap_add, *RUNTIME_CAPS["capture"]]),
            "startupProbe": _probe(cap, failures=60),
            "volumeMounts": [_results_mount()]}


def client_container(plan: Plan, svcs: dict[str, Service]) -> dict:
    cl = svcs["client"]
    env = dict(cl.environment)
    for k in ("LAB_PROXY", "LAB_PROXY_CONTROL"):
        env.pop(k, None)                    # no freeze proxy in the pod (make_plan refuses such scenarios)
    env["RUN_ID"] = plan.run_name
    env["LAB_ENDPOINT"] = f"{_twin_host(plan, '$(SHARD)')}:{TWIN_PORT}" if plan.endpoint == "twin" else ""
    shard_cmd = (f"exec python -m lab.deploy.shard {shlex.quote(plan.scenario)} --out \"{RESULTS}/shard-$SHARD\" "
                 f"--client {shlex.quote(plan.client)} --endpoint {plan.endpoint} --duration {plan.duration:g}")
    if plan.budget is not None:
        shard_cmd = f"export LAB_BUDGET=\"$(cat {BUDGET_DIR}/shard-$SHARD)\"\n{shard_cmd}"
    c = {"name": "client", "image": _image(cl.image, plan), "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", k8s_literal(shard_cmd)],
         "env": [_shard_env(JOB_INDEX), {"name": "BATCH", "value": plan.name}, *_env(env)],
         "securityContext": _security([*cl.cap_add, *RUNTIME_CAPS["client"]]),
         "volumeMounts": [_results_mount()]}
    if plan.endpoint == "twin":
        c["volumeMounts"].append(_certs_mount(read_only=True))
    else:
        c["env"].append({"name": "GEMINI_API_KEY",
                         "valueFrom": {"secretKeyRef": {"name": KEY_SECRET, "key": "GEMINI_API_KEY"}}})
    if plan.budget is not None:
        c["volumeMounts"].append({"name": "budget", "mountPath": BUDGET_DIR, "readOnly": True})
    return c


def shard_job(plan: Plan, svcs: dict[str, Service]) -> dict:
    volumes = [_results_volume(plan)]
    if plan.budget is not None:
        volumes.append({"name": "budget", "configMap": {"name": f"{plan.name}-budget"}})
    pod = {**_pod_basics(), "restartPolicy": "Never",
           # compose.yaml's client sysctls, for the pod's one network namespace; tcp_retries2 is not
           # on the kubelet's safe list: nodes need --allowed-unsafe-sysctls=net.ipv4.tcp_retries2
           "securityContext": {"sysctls": [{"name": k, "value": v} for k, v in svcs["client"].sysctls.items()]},
           "initContainers": [capture_container(plan, svcs)], "containers": [client_container(plan, svcs)], "volumes": volumes}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": plan.name, "labels": _labels(plan, "shard")},
            "spec": {"completionMode": "Indexed", "completions": plan.completions, "parallelism": plan.parallelism,
                     # one try per index: a retry would open live sessions a second time, over its share
                     "backoffLimitPerIndex": 0, "maxFailedIndexes": plan.completions,
                     "template": {"metadata": {"labels": _labels(plan, "shard")}, "spec": pod}}}


def twin_objects(plan: Plan, svcs: dict[str, Service]) -> list[dict]:
    """A headless Service and a StatefulSet: twin <i> answers at <name>-twin-<i>.<name>-twin."""
    ep = svcs["endpoint"]
    sel = _labels(plan, "twin")
    twin_args = f"--api-key {TWIN_KEY} --seed $(SHARD) --san {_twin_host(plan, '$(SHARD)')}"
    container = {"name": "twin", "image": _image(ep.image, plan), "imagePullPolicy": "IfNotPresent",
                 "command": [k8s_literal(a) for a in ep.command],
                 "env": [_shard_env(STATEFUL_INDEX),
                         {"name": "BATCH", "value": plan.name},
                         *_env({**ep.environment, "RUN_DIR": _run_dir(plan), "TWIN_ARGS": twin_args})],
                 "ports": [{"containerPort": TWIN_PORT, "name": "twin"}],
                 "securityContext": _security(ep.cap_add), "readinessProbe": _probe(ep, failures=3),
                 "volumeMounts": [_results_mount(), _certs_mount(read_only=False)]}
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


def fan_in_job(plan: Plan, svcs: dict[str, Service], wait_s: int | None = None) -> dict:
    """Waits until every index left its DONE_MARKER, then `lab report` over all shard folders."""
    wait_s = wait_s or int(plan.duration) + 3600        # the runs, plus image pulls and start-up
    script = (f"until [ \"$(ls {RESULTS}/shard-*/{DONE_MARKER} 2>/dev/null | wc -l)\" -ge {plan.completions} ]; "
              f"do sleep 10; done\nexec lab report {RESULTS}")
    container = {"name": "report", "image": _image(svcs["client"].image, plan), "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", k8s_literal(script)], "env": [{"name": "BATCH", "value": plan.name}],
                 "securityContext": _security(),
                 "volumeMounts": [_results_mount()]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{plan.name}-report", "labels": _labels(plan, "report")},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": wait_s,
                     "template": {"metadata": {"labels": _labels(plan, "report")},
                                  "spec": {**_pod_basics(), "restartPolicy": "Never", "containers": [container],
                                           "volumes": [_results_volume(plan)]}}}}


def render(plan: Plan, svcs: dict[str, Service] | None = None) -> list[dict]:
    """Every object of the batch, in the order `kubectl apply` should create them."""
    svcs = svcs or services()
    objs: list[dict] = []
    if plan.budget is not None:
        objs.append(budget_map(plan))
    if plan.endpoint == "twin":
        objs += [*twin_objects(plan, svcs), isolation_policy(plan)]
    return [*objs, shard_job(plan, svcs), fan_in_job(plan, svcs)]


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
