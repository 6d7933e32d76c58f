"""`lab bench faults`: how fast a fault takes hold. Figures and ratios only, never asserts.

For each mode (silent, eperm, reject, loss) a worker process *already inside the client
namespace* (as the agent is) keeps a TCP flow busy (64 B every 0.5 ms) and applies the fault
through a FaultTable. Per iteration it records, from the scheduled time t (just before the apply):

  active      t -> iptables-restore returned (the nf_tables commit is synchronous: the rule is live)
  first drop  t -> the first packet the fault logged, as tcpdump on nflog:5 stamps it (read time)
  clear       the clear's own duration

The userspace delay (kind delay: NFQUEUE and a worker process) has its own row: onset (the worker
starts and binds its queue, then the rule goes in), clear, and how far the added delay of a TCP
connect (its SYN held) is from what was asked: connect time with the fault minus without, minus asked.

Accuracy of the userspace holding (`accuracy` rows): with the fault in place, `--accuracy-n`
connects in a row, each SYN held once; added = connect time minus the no-fault connect p50 measured
just before (the in-run baseline), against what was asked: delay 100 ms (error p50/p99; floor
p99 <= 2 ms) and delay 100 ms +- 50 ms jitter (the observed spread against the asked uniform one:
its range and standard deviation as ratios). Reorder and duplicate are counted on real UDP flows
by tests/integration/test_netem.py.

Baselines, the way a fault is applied from outside: `ip netns exec <ns> iptables-restore` (an
exec-style spawn into the namespace) and, where a Docker engine answers and a container is named
(`--docker-container` or $LIVELAB_BENCH_CONTAINER; otherwise a throw-away container from
`--docker-image`, default lab-base:bookworm, with --network none), `docker exec <c> iptables-restore`. The
ratios are baseline p50 / in-namespace p50.

Router faults (`router` section, lab/bench/router_faults.py): a `node: router` fault, anchor ->
rule in force at the router, in netns (its own router topology) and in Compose (the router
service over the ctl network), beside the agent's own fault in the same run; `--router-only` runs
just that section.

Reusable pieces: `worker(config)` runs inside any namespace (compose: `docker exec -i client
python -m lab.bench.faults --worker JSON`), `run_worker(prefix, config)` runs it under an exec
prefix and returns its rows, `report(rows, baselines)` prints the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

from lab.bench import router_faults
from lab.errors import LabError
from lab.stats.order import quantile
from lab.topology.netns import NetnsTopology
from lab.topology.uplink import down
from netem.errors import NetemError
from netem.faults import build
from netem.kinds.delay import REALTIME_ENV
from netem.kernel import in_netns
from netem.table import FaultTable

MODES = ("silent", "eperm", "reject", "loss")
B2B = "silent-b2b"  # silent, applied immediately after another fault was cleared
FLOOR_MS = 5.0
PROGRESS = "progress: "  # a worker's stderr line that run_worker prints at once


# ------------------------------------------------------------------------------------ worker

class NflogWatch:
    """tcpdump on nflog:5 in this namespace; keeps the pcap timestamps of what it sees."""

    def __init__(self):
        self.stamps: list[float] = []
        self.cv = threading.Condition()
        self.proc = subprocess.Popen(["tcpdump", "-i", "nflog:5", "-l", "-n", "-tt", "--immediate-mode"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        line = ""
        for _ in range(5):
            line = self.proc.stderr.readline()
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump on nflog:5 did not start: {line.strip() or self.proc.poll()}")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ts = float(line.split(" ", 1)[0])
            except ValueError:
                continue
            with self.cv:
                self.stamps.append(ts)
                self.cv.notify_all()

    def first_after(self, t: float, timeout: float = 2.0) -> float | None:
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for ts in self.stamps:
                    if ts >= t:
                        return ts
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)

    def close(self):
        self.proc.terminate()
        self.proc.wait(3)


class Busy:
    """A TCP connection that writes 64 B every 0.5 ms until stopped or reset."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                self.sock.send(b"x" * 64)
            except OSError:
                return
            time.sleep(0.0005)

    def flow(self) -> dict:
        src, sport = self.sock.getsockname()
        dst, dport = self.sock.getpeername()
        return {"src": src, "sport": sport, "dst": dst, "dport": dport}

    def close(self):
        self.stop.set()
        self.th.join(1)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass


def fault_spec(mode: str, flow: dict, p: float) -> dict:
    if mode == B2B:
        mode = "silent"
    if mode in ("silent", "eperm"):
        return {"kind": "blackhole", "name": f"bench-{mode}", "mode": mode, "direction": "out", "target": flow}
    if mode == "reject":
        return {"kind": "reject", "name": "bench-reject", "direction": "out", "target": flow}
    return {"kind": "loss", "name": "bench-loss", "p": p, "direction": "out", "target": flow}


def worker(config: dict) -> dict:
    """Inside the client namespace: apply each mode n times.

    Returns {"rows": [{mode, active_ms, drop_ms, clear_ms}], "spawn_in_ns": [ms]}: the second is one
    `iptables-restore` process per change, spawned from inside the namespace (what a FaultTable
    without its persistent iptables-restore would cost).
    """
    if config.get("router"):
        return router_faults.worker(config["router"])
    if config.get("accuracy_only"):
        return {"rows": [], "spawn_in_ns": [], "delay": {}, **accuracy_parts(config)}
    host, port, n, p = config["host"], config["port"], config["n"], config.get("p", 0.3)
    gap = config.get("gap", 0.05)
    rows = []
    watch = NflogWatch()
    try:
        with FaultTable(handle_signals=False) as table:
            for mode in config.get("modes", MODES + (B2B,)):
                progress(f"  onset: {mode}")
                for i in range(n + 2):  # two warm-up rounds, not recorded
                    busy = Busy(host, port)
                    try:
                        time.sleep(gap)  # faults in a scenario are far apart; see B2B for back-to-back
                        f = build(fault_spec(mode, busy.flow(), p))
                        if mode == B2B:  # apply right after another fault was cleared
                            g = build({**fault_spec("silent", busy.flow(), p), "name": "bench-prev",
                                       "target": {"dst": "10.203.255.254"}})
                            table.add(g)
                            time.sleep(gap)
                            table.remove(g)
                        t = time.time()
                        table.add(f)
                        t_active = time.time()
                        ts = watch.first_after(t)
                        t0 = time.time()
                        table.remove(f)
                        t_clear = time.time() - t0
                    finally:
                        busy.close()
                    if i >= 2:
                        rows.append({"mode": mode, "active_ms": (t_active - t) * 1e3,
                                     "drop_ms": None if ts is None else (ts - t) * 1e3,
                                     "clear_ms": t_clear * 1e3})
    finally:
        watch.close()
    return {"rows": rows, "spawn_in_ns": exec_baseline([], n, gap), "delay": delay_rows(config),
            **accuracy_parts(config)}


def accuracy_parts(config: dict) -> dict:
    """The held connects (`accuracy`) and, where a stamped receiver listens, the one-way datagrams."""
    if not config.get("accuracy_n", 100):
        return {"accuracy": {}, "one_way": {}}
    return {"accuracy": accuracy_rows(config),
            "one_way": one_way_rows(config) if config.get("udp_port") else {}}


def _connect_ms(host: str, port: int) -> float:
    t = time.monotonic()
    socket.create_connection((host, port), timeout=5).close()
    return (time.monotonic() - t) * 1e3


def delay_rows(config: dict) -> dict:
    """The userspace delay, n times: onset and clear (ms), and the added-delay error (ms) of a
    connect whose SYN is held, against a connect just before without the fault."""
    host, port, n, asked = config["host"], config["port"], config["n"], config.get("delay_ms", 40.0)
    out: dict = {"asked_ms": asked, "active_ms": [], "clear_ms": [], "error_ms": []}
    spec = {"kind": "delay", "name": "bench-delay", "delay_ms": asked, "direction": "out",
            "target": {"dst": host, "dport": port}}
    try:
        with FaultTable(handle_signals=False) as table:
            for i in range(n + 2):  # two warm-up rounds, not recorded
                base = _connect_ms(host, port)
                f = build(spec)
                t = time.time()
                table.add(f)
                active = (time.time() - t) * 1e3
                held = _connect_ms(host, port)
                t = time.time()
                table.remove(f)
                if i >= 2:
                    out["active_ms"].append(active)
                    out["clear_ms"].append((time.time() - t) * 1e3)
                    out["error_ms"].append(held - base - asked)
    except NetemError as e:
        out["error"] = str(e)
    return out


ACCURACY = (("delay 100 ms", 100.0, 0.0), ("jitter 100+-50 ms", 100.0, 50.0))
ACCURACY_FLOOR_MS = 2.0   # the goal: p99 error <= 2 ms at 100 ms asked


def accuracy_rows(config: dict) -> dict:
    """Per ACCURACY case: the no-fault connect times (ms) and the added delay of each held connect."""
    host, port, n = config["host"], config["port"], config.get("accuracy_n", 100)
    out: dict = {}
    try:
        with FaultTable(handle_signals=False) as table:
            for label, delay, jitter in ACCURACY:
                progress(f"  held connects: {label}")
                base = [_connect_ms(host, port) for _ in range(n)]
                f = build({"kind": "delay", "name": "bench-acc", "delay_ms": delay, "jitter_ms": jitter,
                           "direction": "out", "target": {"dst": host, "dport": port}})
                table.add(f)
                try:
                    _connect_ms(host, port)          # warm-up: the worker's first packet
                    held = []
                    for _ in range(n):
                        # the last connect's ACK and FIN are held too, and order is kept: let them
                        # go first, or this SYN would wait for them (a max of draws, not one draw).
                        # Two holds: the ACK of the endpoint's FIN leaves only after our held FIN
                        # reached it, and is held in turn.
                        time.sleep(2 * (delay + jitter) / 1000 + 0.01)
                        held.append(_connect_ms(host, port))
                finally:
                    table.remove(f)
                b50 = quantile(base, .5)
                out[label] = {"asked_ms": delay, "jitter_ms": jitter, "base_ms": base,
                              "added_ms": [h - b50 for h in held]}
    except NetemError as e:
        out["error"] = str(e)
    return out


def _head(part: dict, what: str, title: str) -> list[str]:
    """A part's first line: none when it was not run, its error when it failed, else its title."""
    if not part:
        return []
    return [f"{what}: not measured: {part['error']}" if part.get("error") else title]


def accuracy_lines(acc: dict) -> list[str]:
    """Added vs asked per case; for jitter, the observed spread over the asked uniform one."""
    lines = _head(acc, "accuracy (userspace holding)", "accuracy, held connects (the application's view: "
                  "the client's own wake-up on the SYN-ACK is in each figure, the no-fault connects' too):")
    if not lines or acc.get("error"):
        return lines
    for label, r in acc.items():
        added, asked, j = r["added_ms"], r["asked_ms"], r["jitter_ms"]
        err = [a - asked for a in added]
        line = (f"accuracy {label:18s} n={len(added)}: no-fault connect p50 {quantile(r['base_ms'], .5):.2f} ms "
                f"(baseline); added p50 {quantile(added, .5):.2f} p99 {quantile(added, .99):.2f} ms = "
                f"{quantile(added, .5) / asked:.3f}x asked; error p50 {quantile(err, .5):+.2f} p99 {quantile(err, .99):+.2f} ms")
        if not j:
            met = abs(quantile(err, .99)) <= ACCURACY_FLOOR_MS
            line += f" (floor |p99| <= {ACCURACY_FLOOR_MS:g} ms: {'met' if met else 'NOT met'})"
        else:
            mean = sum(added) / len(added)
            sd = (sum((a - mean) ** 2 for a in added) / len(added)) ** 0.5
            line += (f"; range {min(added):.1f}..{max(added):.1f} ms for asked {asked - j:g}..{asked + j:g} "
                     f"({(max(added) - min(added)) / (2 * j):.2f}x the asked width); sd {sd:.1f} ms = "
                     f"{sd / (j / 3 ** 0.5):.2f}x the asked uniform sd")
        lines.append(line)
    return lines


# ---- one-way accuracy: what the fault adds to a packet, free of the measuring process's wake-ups
#
# A held connect's time also carries the client's own wake-up on the SYN-ACK (an ordinary process:
# ms under load), in the baseline and the held connect alike. Here each UDP datagram carries its
# send time and the endpoint's socket is stamped by the kernel on receipt (SO_TIMESTAMPNS), so
# one-way delay = receive stamp - send time: the fault's hold plus the stack (no-fault baseline).

ONE_WAY_ASKED_MS = (20.0, 100.0, 300.0)
ONE_WAY_GAP_S = 0.01        # between datagrams; each is held alone (no jitter: order costs nothing)
SO_TIMESTAMPNS = 35         # Linux <asm-generic/socket.h>; Python's socket module does not name it
BUSY_SRC = "while True: pass"


class StampedReceiver:
    """A UDP socket in namespace `ns` keeping each datagram's (tag, one-way ms by the kernel's stamp)."""

    def __init__(self, ns: str, host: str):
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[tuple[str, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(512, 64)
            except OSError:
                return
            for _level, kind, raw in anc:
                if kind == SO_TIMESTAMPNS and len(data) > 8:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    sent = struct.unpack_from("!d", data)[0]
                    self.got.append((data[8:].decode(), (sec + nsec / 1e9 - sent) * 1e3))

    def by_tag(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for tag, ms in self.got:
            out.setdefault(tag, []).append(ms)
        return out

    def close(self) -> None:
        self.sock.close()


class BusyProcesses:
    """`k` processes spinning at ordinary priority: load made on purpose, one per core."""

    def __init__(self, k: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_SRC]) for _ in range(k)]

    def __enter__(self) -> "BusyProcesses":
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def one_way_rows(config: dict) -> dict:
    """In the client namespace: datagrams to the stamped receiver, tagged `load/realtime/asked`.

    Per load (the machine as it is; plus a busy process per core): `n` without a fault (tag
    base/<load>), then per worker kind (real-time, ordinary: $LIVELAB_DELAY_REALTIME=0, the worker
    as it was before) and asked delay, `n` held. Returns what was sent; the receiver has the rest."""
    host, port, n = config["host"], config["udp_port"], config.get("one_way_n", 100)
    loads = (0, os.cpu_count() or 1) if config.get("load", True) else (0,)
    out: dict = {"loads": list(loads), "asked_ms": list(ONE_WAY_ASKED_MS), "loadavg": {}}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send_n(tag: str) -> None:
        for _ in range(n):
            sock.sendto(struct.pack("!d", time.time()) + tag.encode(), (host, port))
            time.sleep(ONE_WAY_GAP_S)

    try:
        with FaultTable(handle_signals=False) as table:
            for load in loads:
                with BusyProcesses(load):
                    send_n(f"base/{load}")
                    for realtime in (1, 0):
                        for asked in ONE_WAY_ASKED_MS:
                            progress(f"  one-way: {'real-time' if realtime else 'ordinary'} worker, {asked:g} ms, "
                                     f"{'+%d busy' % load if load else 'no added load'}")
                            os.environ[REALTIME_ENV] = str(realtime)   # the fault's worker inherits it
                            f = build({"kind": "delay", "name": "bench-1way", "delay_ms": asked, "direction": "out",
                                       "target": {"dst": host, "dport": port, "proto": "udp"}})
                            table.add(f)
                            try:
                                send_n(f"{load}/{realtime}/{asked:g}")
                                time.sleep(asked / 1000 + 0.05)          # the last one is out
                            finally:
                                table.remove(f)
                    out["loadavg"][str(load)] = os.getloadavg()[0]
    except NetemError as e:
        out["error"] = str(e)
    finally:
        os.environ.pop(REALTIME_ENV, None)
        sock.close()
    return out


def one_way_lines(sent: dict, got: dict[str, list[float]]) -> list[str]:
    """Error (added - asked) p50/p99 per load, worker kind and asked delay, against the in-run baseline."""
    lines = _head(sent, "accuracy one-way (UDP, kernel receive stamps)", "accuracy one-way (UDP, each "
                  "datagram's send time vs the endpoint kernel's receive stamp; added = one-way minus the "
                  "no-fault one-way p50 of the same load):")
    if not lines or sent.get("error"):
        return lines
    for load in sent["loads"]:
        base = got.get(f"base/{load}", [])
        b50 = quantile(base, .5)
        what = "the machine as it is" if not load else f"+{load} busy processes (one per core)"
        lines.append(f"  {what}, load average {sent['loadavg'].get(str(load), float('nan')):.1f}: "
                     f"no-fault one-way p50 {b50:.3f} p99 {quantile(base, .99):.3f} ms (baseline, n={len(base)})")
        p99s = {}
        for realtime in (1, 0):
            for asked in sent["asked_ms"]:
                err = [ms - b50 - asked for ms in got.get(f"{load}/{realtime}/{asked:g}", [])]
                if not err:
                    lines.append(f"    {'real-time' if realtime else 'ordinary'} worker {asked:>5g} ms: nothing received")
                    continue
                p99s[(realtime, asked)] = quantile(err, .99)
                line = (f"    {'real-time' if realtime else 'ordinary '} worker {asked:>5g} ms asked, n={len(err)}: "
                        f"added p50 {quantile(err, .5) + asked:.2f} ms = {(quantile(err, .5) + asked) / asked:.4f}x asked; "
                        f"error p50 {quantile(err, .5):+.3f} p99 {quantile(err, .99):+.3f} max {max(err):+.3f} ms, "
                        f"{sum(e > ACCURACY_FLOOR_MS for e in err)} over +{ACCURACY_FLOOR_MS:g} ms")
                if asked == 100.0:
                    met = abs(quantile(err, .99)) <= ACCURACY_FLOOR_MS
                    line += f" (floor |p99| <= {ACCURACY_FLOOR_MS:g} ms: {'met' if met else 'NOT met'})"
                lines.append(line)
        ratios = [f"{a:g} ms {p99s[(0, a)] / p99s[(1, a)]:.1f}x" for a in sent["asked_ms"]
                  if (0, a) in p99s and (1, a) in p99s and p99s[(1, a)] > 0]
        if ratios:
            lines.append(f"    error p99, ordinary over real-time worker: {', '.join(ratios)}")
    return lines


def run_worker(prefix: list[str], config: dict, python: str = sys.executable, env: dict | None = None) -> dict:
    """Run worker(config) under an exec prefix (ip netns exec NS / docker exec -i C); its result."""
    argv = [*prefix, python, "-m", "lab.bench.faults", "--worker", json.dumps(config)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    last: list[str] = []

    def relay() -> None:   # the worker's progress lines as they come; the rest kept for the error
        for line in proc.stderr:
            if line.startswith(PROGRESS):
                print(line[len(PROGRESS):].rstrip(), flush=True)
            elif line.strip():
                last[:] = [line.strip()]
    th = threading.Thread(target=relay, daemon=True)
    th.start()
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise LabError("bench worker failed: no result after 600 s") from None
    th.join(5)
    if proc.returncode != 0:
        raise LabError(f"bench worker failed: {(last or ['?'])[-1]}")
    return json.loads(out.strip().splitlines()[-1])


def progress(text: str) -> None:
    """A line for whoever runs the worker (run_worker prints it as it comes)."""
    sys.stderr.flush()
    os.write(2, (PROGRESS + text + "\n").encode())   # one write: a whole line even beside other writers


# ------------------------------------------------------------------------------------ baselines

BASELINE_TEXT = ("*filter\n:LL_BENCH - [0:0]\n"
                 "-A LL_BENCH -d 10.203.255.254/32 -j NFLOG --nflog-group 5 --nflog-threshold 1\n"
                 "-A LL_BENCH -d 10.203.255.254/32 -j NFQUEUE --queue-num 99\nCOMMIT\n")
BASELINE_CLEAN = "*filter\n:LL_BENCH - [0:0]\n-X LL_BENCH\nCOMMIT\n"


def exec_baseline(prefix: list[str], n: int, gap: float = 0.05) -> list[float]:
    """Wall ms of `<prefix> iptables-restore --noflush` with a two-rule fault, spawned from here."""
    out = []
    for i in range(n + 2):
        time.sleep(gap)  # same spacing as the in-namespace rows (see B2B)
        t = time.time()
        subprocess.run([*prefix, "iptables-restore", "--noflush"], input=BASELINE_TEXT, text=True,
                       capture_output=True, check=True)
        if i >= 2:
            out.append((time.time() - t) * 1e3)
    subprocess.run([*prefix, "iptables-restore", "--noflush"], input=BASELINE_CLEAN, text=True, capture_output=True)
    return out


def docker_target(name: str | None, image: str) -> tuple[str | None, bool, str]:
    """(container, made_here, why-not). Without a named container, a throw-away one is started from
    `image` (it needs iptables; --network none, so it has its own empty namespace)."""
    if not shutil.which("docker"):
        return None, False, "docker CLI not installed"
    try:
        ok = subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        return None, False, "no Docker engine answers (`docker info` failed)"
    if name:
        return name, False, ""
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        return None, False, f"no container named (--docker-container) and no image {image} to start one"
    cname = f"ll-bench-{os.getpid()}"
    p = subprocess.run(["docker", "run", "-d", "--rm", "--network", "none", "--cap-add", "NET_ADMIN",
                        "--name", cname, image, "sleep", "600"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, False, f"could not start a throw-away container: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
    return cname, True, ""


# ------------------------------------------------------------------------------------ report

def report(rows: list[dict], baselines: dict[str, list[float]], notes: list[str], out=sys.stdout,
           delay: dict | None = None, accuracy: dict | None = None, one_way: list[str] = ()) -> dict:
    summary: dict = {"modes": {}, "baselines": {}}
    w = out.write
    if rows:
        _mode_lines(rows, baselines, summary, w)
    _delay_lines(delay, summary, w)
    for line in [*accuracy_lines(accuracy or {}), *one_way]:
        w(line + "\n")
    for n in notes:
        w(f"note: {n}\n")
    return summary


def _mode_lines(rows: list[dict], baselines: dict[str, list[float]], summary: dict, w) -> None:
    w(f"{'mode':10} {'n':>3}  {'rule active p50/p99 ms':>24}  {'first drop on nflog p50/p99 ms':>32}  {'clear p50/p99 ms':>18}\n")
    all_active = []
    for mode in MODES + (B2B,):
        r = [x for x in rows if x["mode"] == mode]
        if not r:
            continue
        a = [x["active_ms"] for x in r]
        d = [x["drop_ms"] for x in r if x["drop_ms"] is not None]
        c = [x["clear_ms"] for x in r]
        if mode != B2B:
            all_active += a
        miss = len(r) - len(d)
        s = {"n": len(r), "active_p50": quantile(a, .5), "active_p99": quantile(a, .99), "drop_p50": quantile(d, .5),
             "drop_p99": quantile(d, .99), "clear_p50": quantile(c, .5), "clear_p99": quantile(c, .99), "no_drop_seen": miss}
        summary["modes"][mode] = s
        w(f"{mode:10} {len(r):>3}  {s['active_p50']:>11.2f} / {s['active_p99']:<10.2f}  "
          f"{s['drop_p50']:>15.2f} / {s['drop_p99']:<14.2f}  {s['clear_p50']:>8.2f} / {s['clear_p99']:<7.2f}"
          + (f"  ({miss} without a drop)" if miss else "") + "\n")
    in_p50 = quantile(all_active, .5)
    w(f"\nall modes but {B2B}: rule active p50 {in_p50:.2f} ms, p99 {quantile(all_active, .99):.2f} ms "
      f"(floor p99 <= {FLOOR_MS:.0f} ms: {'met' if quantile(all_active, .99) <= FLOOR_MS else 'NOT met'})\n")
    for name, xs in baselines.items():
        b50, b99 = quantile(xs, .5), quantile(xs, .99)
        ratio = b50 / in_p50 if in_p50 else float("nan")
        summary["baselines"][name] = {"p50": b50, "p99": b99, "ratio_p50": ratio}
        w(f"baseline {name}: p50 {b50:.2f} ms, p99 {b99:.2f} ms  ->  {ratio:.1f}x the in-namespace p50\n")


def _delay_lines(delay: dict | None, summary: dict, w) -> None:
    if delay and delay.get("error"):
        w(f"delay (userspace, NFQUEUE): not measured: {delay['error']}\n")
    elif delay and delay.get("active_ms"):
        a, c, e = delay["active_ms"], delay["clear_ms"], delay["error_ms"]
        summary["delay"] = {"asked_ms": delay["asked_ms"], "n": len(a), "active_p50": quantile(a, .5),
                            "active_p99": quantile(a, .99), "clear_p50": quantile(c, .5), "clear_p99": quantile(c, .99),
                            "error_p50": quantile(e, .5), "error_p99": quantile(e, .99)}
        d = summary["delay"]
        w(f"delay (userspace, NFQUEUE) asked {d['asked_ms']:g} ms, n={d['n']}: onset (worker + rule) p50 "
          f"{d['active_p50']:.1f} / p99 {d['active_p99']:.1f} ms, clear p50 {d['clear_p50']:.1f} / p99 "
          f"{d['clear_p99']:.1f} ms, added-delay error p50 {d['error_p50']:+.2f} / p99 {d['error_p99']:+.2f} ms\n")


def _accuracy_seconds(n: int, one_way_n: int, load: bool) -> float:
    """A rough duration for the progress line: the held connects and the one-way datagrams."""
    connects = sum(n * (2 * (d + j) / 1000 + 0.01 + d / 1000) for _l, d, j in ACCURACY)
    one_way = (2 if load else 1) * (one_way_n * ONE_WAY_GAP_S * (1 + 2 * len(ONE_WAY_ASKED_MS))
                                    + 2 * sum(a / 1000 + 0.05 for a in ONE_WAY_ASKED_MS))
    return connects + one_way


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench faults", description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30, help="iterations per mode (default 30)")
    ap.add_argument("-p", type=float, default=0.3, help="loss probability for the loss mode (default 0.3)")
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between a clear and the next apply (default 0.05)")
    ap.add_argument("--accuracy-n", type=int, default=100,
                    help="held connects, and held datagrams, per accuracy case (0: skip the accuracy part)")
    ap.add_argument("--one-way-n", type=int, default=300, help="datagrams per one-way accuracy case (default 300)")
    ap.add_argument("--accuracy-only", action="store_true", help="only the accuracy part (no onset modes)")
    ap.add_argument("--no-load", action="store_true",
                    help="accuracy without the added load (a busy process per core) beside it")
    ap.add_argument("--docker-container", default=os.environ.get("LIVELAB_BENCH_CONTAINER"))
    ap.add_argument("--docker-image", default="lab-base:bookworm",
                    help="image for a throw-away container when none is named (needs iptables)")
    ap.add_argument("--router-only", action="store_true",
                    help="only the router section (a router fault's onset at the router, beside the agent's own)")
    ap.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--topology", choices=["netns", "compose"], default="netns",
                    help="where the client's namespace is: plain namespaces, or the compose lab's client container")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.topology == "compose":
        return _main_compose(args)
    if args.router_only:
        return _router_netns(args)

    topo = NetnsTopology(f"bench{os.getpid()}")
    topo.up()
    sink = stamped = None
    try:
        stamped = StampedReceiver(topo.ns_endpoint, topo.endpoint_host)
        with in_netns(topo.ns_endpoint):
            sink = socket.socket()
        sink.bind((topo.endpoint_host, 0))
        sink.listen(64)
        port = sink.getsockname()[1]
        threading.Thread(target=_drain, args=(sink,), daemon=True).start()

        print(f"lab bench faults: fault onset in the netns topology, n={args.n} per mode, "
              f"TCP 64 B every 0.5 ms, loss p={args.p}" if not args.accuracy_only else
              "lab bench faults: the userspace delay's accuracy only, in the netns topology")
        if args.accuracy_n:
            print(f"accuracy part: {args.accuracy_n} held connects per case, then {args.one_way_n} datagrams per "
                  f"one-way case ({len(ONE_WAY_ASKED_MS)} delays x real-time/ordinary worker x "
                  f"{'1 load' if args.no_load else '2 loads'}): about "
                  f"{_accuracy_seconds(args.accuracy_n, args.one_way_n, not args.no_load):.0f} s", flush=True)
        prefix = ["ip", "netns", "exec", topo.ns_client]
        res = run_worker(prefix, {"host": topo.endpoint_host, "port": port, "n": args.n, "p": args.p, "accuracy_n": args.accuracy_n,
                                  "gap": args.gap, "udp_port": stamped.port, "one_way_n": args.one_way_n,
                                  "load": not args.no_load, "accuracy_only": args.accuracy_only})
        baselines, notes = ({}, []) if args.accuracy_only else _onset_baselines(args, prefix, topo.ns_client, res)
        summary = report(res["rows"], baselines, notes, delay=res.get("delay"), accuracy=res.get("accuracy"),
                         one_way=one_way_lines(res.get("one_way", {}), stamped.by_tag()))
        if args.json:
            print(json.dumps(summary, indent=2))
    finally:
        if stamped:
            stamped.close()
        if sink:
            sink.close()
        topo.down()
        down(topo.run_id, current_ns=False)
    return _router_netns(args)


def _router_netns(args) -> int:
    """The router section in netns: a topology of its own with a router on one access link."""
    topo = NetnsTopology(f"benchr{os.getpid()}", links=["wifi"])
    topo.up()
    local = FaultTable(topo.ns_client, handle_signals=False)
    try:
        res = router_faults.measure(local, topo.router_part.table(), topo.endpoint_host, args.n, args.gap)
        where = "netns: the agent's FaultTable on the router namespace"
        print("\n".join(router_faults.lines(where, res)), flush=True)
    finally:
        local.close()
        topo.down()
        down(topo.run_id, current_ns=False)
    return 0


def _onset_baselines(args, prefix: list[str], ns: str, res: dict) -> tuple[dict, list[str]]:
    """The onset part's baselines (exec-style, docker exec) and its notes."""
    baselines = {"in the namespace, one iptables-restore process per change": res["spawn_in_ns"],
                 f"exec-style `ip netns exec {ns} iptables-restore`": exec_baseline(prefix, args.n, args.gap)}
    notes = ["rule active = the iptables-restore call returned, from a process already in the client "
             "namespace; first drop = tcpdump's nflog:5 timestamp (read time, +-ms) minus the scheduled time",
             f"loss: the first drop also waits for a losing coin toss (about 0.5 ms x (1/p - 1) = "
             f"{0.5 * (1 / args.p - 1):.1f} ms at p={args.p})",
             f"{B2B}: applied right after another fault was cleared. nf_tables frees a removed rule "
             "after an RCU grace period, and the next transaction waits for that: ~10-20 ms on this "
             "kernel. Faults in a scenario are seconds apart, so the other rows wait "
             f"{args.gap * 1000:.0f} ms first"]
    container, made, why = docker_target(args.docker_container, args.docker_image)
    if container:
        try:
            baselines[f"`docker exec {container} iptables-restore`"] = exec_baseline(
                ["docker", "exec", "-i", container], args.n, args.gap)
        finally:
            if made:
                subprocess.run(["docker", "rm", "-f", container], capture_output=True)
    else:
        notes.append(f"docker exec baseline not measured: {why}; the exec-style baseline is "
                     "`ip netns exec` (a process spawned into the namespace from outside)")
    return baselines, notes


# A sink in the endpoint container that reads whatever the bench's flow sends.
SINK_SRC = ("import socket,threading\n"
            "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',9099));s.listen(64)\n"
            "def d(c):\n while c.recv(65536): pass\n"
            "while True:\n c,_=s.accept();threading.Thread(target=d,args=(c,),daemon=True).start()\n")


def _main_compose(args) -> int:
    """The same worker inside the compose lab's client container: the agent's own path there."""
    from lab.topology.compose import ComposeTopology  # lazy: the docker SDK is on the host only, not in the images

    topo = ComposeTopology(f"bench{os.getpid()}", log=lambda s: None, links=["wifi"])
    try:
        topo.up()
        if args.router_only:
            _router_compose(topo, args)
            return 0
        topo.compose("exec", "-T", "-d", "endpoint", "python", "-c", SINK_SRC)
        time.sleep(1.0)
        cid = topo.container_id("client")
        print(f"lab bench faults: fault onset in the compose topology (client container {cid[:12]}), "
              f"n={args.n} per mode, TCP 64 B every 0.5 ms, loss p={args.p}")
        res = run_worker(topo.compose_argv("exec", "-T", "client"),
                         {"host": topo.endpoint_ip, "port": 9099, "n": args.n, "p": args.p, "accuracy_n": args.accuracy_n,
                          "gap": args.gap, "accuracy_only": args.accuracy_only},
                         python="python", env=topo._env())
        baselines = {"in the container, one iptables-restore process per change": res["spawn_in_ns"],
                     f"`docker exec {cid[:12]} iptables-restore`": exec_baseline(["docker", "exec", "-i", cid],
                                                                                args.n, args.gap)}
        notes = ["rule active = the iptables-restore call returned, from the agent's place: a process already "
                 "in the client container; first drop = nflog:5 read time minus the scheduled time",
                 "accuracy one-way (kernel receive stamps) not measured here: its receiver runs in the "
                 "endpoint namespace of the netns topology"]
        summary = report(res["rows"], baselines, notes, delay=res.get("delay"), accuracy=res.get("accuracy"))
        if args.json:
            print(json.dumps(summary, indent=2))
        _router_compose(topo, args)
    finally:
        topo.down()
    return 0


def _router_compose(topo, args) -> None:
    """The router section in Compose: from the client container, the router service's table."""
    res = run_worker(topo.compose_argv("exec", "-T", "client"),
                     {"router": {"control": topo.router_part.control, "dst": topo.endpoint_ip,
                                 "n": args.n, "gap": args.gap}},
                     python="python", env=topo._env())
    print("\n".join(router_faults.lines("Compose: the router service over the ctl network", res)), flush=True)


def _drain(ls: socket.socket) -> None:
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        threading.Thread(target=_read_all, args=(c,), daemon=True).start()


def _read_all(c: socket.socket) -> None:
    with c:
        while True:
            try:
                if not c.recv(65536):
                    return
            except OSError:
                return


if __name__ == "__main__":
    raise SystemExit(main())
