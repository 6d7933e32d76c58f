"""One pcapng per run that Wireshark opens with no setup: wire + dropped packets + timeline + TLS keys.

The topology's capture writes raw files into the run folder, each named raw-*.pcap:

    raw-eth.pcap     tcpdump on the client's eth0 (nanosecond kernel timestamps)
    raw-nflog.pcap   tcpdump on nflog:5: every packet a lab fault dropped or rejected, with the
                     fault in the NFLOG prefix (`nflog.prefix`); stamped when tcpdump read it (±ms)

and with a router (lab/topology/router.py) in place of raw-eth.pcap:

    raw-eth-<link>.pcap  tcpdump on the router's end of each access link (wifi, cell)
    raw-nflog-router.pcap  tcpdump on the router's nflog:5: what its middlebox faults dropped

`finalize()` merges them with one marker frame per timeline event, each at the event's exact wall
time and carrying the event as a packet comment (and as its payload, ethertype 0x88b5), then embeds
the TLS secrets (`editcap --inject-secrets tls,<keylog>`), so a wss run decrypts in Wireshark with
nothing configured. The wall clock of the events and the pcap timestamps is the same kernel clock.

In Wireshark: `frame.comment` shows the timeline, `nflog` the dropped packets (`nflog.prefix`
names the fault), `websocket` the decrypted frames, `eth.type == 0x88b5` only the markers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

from lab.errors import CapabilityError, LabError
from lab.events import Event

MARKER_ETHERTYPE = 0x88B5  # IEEE 802 local experimental ethertype
MARKER_SRC = "02:11:ab:00:00:01"
MARKER_DST = "02:11:ab:00:00:02"
RAW_FILES = ("raw-eth.pcap", "raw-nflog.pcap")   # the client's two, in every topology without a router
RAW_GLOB = "raw-*.pcap"                           # every raw capture, a router's included
PCAP_HEADER = 24
_SKIP_FIELDS = {"t", "ms", "src", "kind"}


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise CapabilityError(f"{', '.join(missing)} not installed (apt-get install tshark: it brings "
                              f"tshark, editcap and mergecap)")


def _run(argv: list[str], what: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or [f"rc={p.returncode}"])[-1]
        raise LabError(f"{what} failed: {err}")
    return p.stdout


def event_text(e: Event, limit: int = 300) -> str:
    """One line for an event: `kind +ms src key=value ...` (no tabs or newlines)."""
    parts = [f"{e.kind}", f"+{e.ms:.1f}ms", f"src={e.src}"]
    for k, v in e.data.items():
        if k in _SKIP_FIELDS or v is None:
            continue
        s = str(v)
        parts.append(f"{k}={s if len(s) <= 60 else s[:57] + '...'}")
    text = " ".join(parts).replace("\t", " ").replace("\n", " ").replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_markers(events: Iterable[Event], path: Path) -> int:
    """A pcapng of marker frames, one per event at its exact time, commented with the event."""
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.utils import wrpcapng

    pkts = []
    for e in sorted(events, key=lambda e: e.t):
        text = "livelab " + event_text(e)
        p = Ether(src=MARKER_SRC, dst=MARKER_DST, type=MARKER_ETHERTYPE) / Raw(text.encode())
        p.time = e.t
        p.comment = text.encode()
        pkts.append(p)
    if pkts:
        wrpcapng(str(path), pkts)
    return len(pkts)


def raw_files(run_dir: Path | str) -> list[Path]:
    """The run folder's raw captures that hold at least a pcap header, by name."""
    return sorted(p for p in Path(run_dir).glob(RAW_GLOB) if p.stat().st_size >= PCAP_HEADER)


def finalize(run_dir: Path | str, events: Iterable[Event] = (), keylog: Path | str | None = None,
             out_name: str = "capture.pcapng") -> Path:
    """Merge the raw captures, the timeline markers and the TLS secrets into run_dir/out_name."""
    require_tools("mergecap", "editcap")
    run_dir = Path(run_dir)
    inputs = raw_files(run_dir)
    out = run_dir / out_name
    with tempfile.TemporaryDirectory(dir=run_dir, prefix=".capture-") as tmp:
        markers = Path(tmp) / "markers.pcapng"
        if write_markers(list(events), markers):
            inputs.append(markers)
        if not inputs:
            raise LabError(f"nothing to merge in {run_dir}: no {RAW_GLOB} and no events")
        merged = Path(tmp) / "merged.pcapng"
        _run(["mergecap", "-F", "pcapng", "-w", str(merged), *map(str, inputs)], "mergecap")
        if keylog and Path(keylog).exists() and Path(keylog).stat().st_size > 0:
            _run(["editcap", "--inject-secrets", f"tls,{keylog}", str(merged), str(out)], "editcap --inject-secrets")
        else:
            os.replace(merged, out)
    return out


def _tshark(pcap: Path | str, args: list[str]) -> list[list[str]]:
    require_tools("tshark")
    out = _run(["tshark", "-n", "-r", str(pcap), *args], f"tshark -r {pcap}")
    return [line.split("\t") for line in out.splitlines() if line]


def comments(pcapng: Path | str) -> list[tuple[int, float, str]]:
    """(frame number, epoch time, comment) for every commented frame, in file order."""
    rows = _tshark(pcapng, ["-Y", "frame.comment", "-T", "fields", "-e", "frame.number",
                            "-e", "frame.time_epoch", "-e", "frame.comment", "-E", "occurrence=a",
                            "-E", "aggregator=|"])
    out = []
    for r in rows:
        if len(r) >= 3:
            for c in r[2].split("|"):
                out.append((int(r[0]), float(r[1]), c))
    return out


def websocket_frames(pcapng: Path | str, port: int, tls: bool = True) -> list[dict]:
    """Decrypted (for tls) WebSocket data frames on `port`: [{frame, t, src, dst, text}], in order.

    Binary frames appear with text=None and their payload length in `len`.
    """
    decode = f"tcp.port=={port},{'tls' if tls else 'http'}"
    rows = _tshark(pcapng, ["-d", decode, "-Y", f"websocket && tcp.port=={port}", "-T", "fields",
                            "-e", "frame.number", "-e", "frame.time_epoch", "-e", "ip.src", "-e", "ip.dst",
                            "-e", "websocket.opcode", "-e", "websocket.payload.text",
                            "-e", "websocket.payload_length",
                            "-E", "occurrence=a", "-E", "aggregator=\x1f"])
    frames = []
    for r in rows:
        r += [""] * (7 - len(r))
        opcodes = r[4].split("\x1f")
        texts = r[5].split("\x1f") if r[5] else []
        lens = r[6].split("\x1f") if r[6] else []
        ti = 0
        for i, op in enumerate(opcodes):
            op = int(op, 0) if op else -1
            if op not in (1, 2, 0):
                continue  # control frames (close, ping, pong) are not data
            text = None
            if op in (1, 0) and ti < len(texts):
                text = texts[ti]
                ti += 1
            frames.append({"frame": int(r[0]), "t": float(r[1]), "src": r[2], "dst": r[3], "opcode": op,
                           "text": text, "len": int(lens[i]) if i < len(lens) and lens[i] else None})
    return frames


def dropped(pcapng: Path | str) -> list[tuple[int, float, str]]:
    """(frame number, epoch time, nflog prefix) of every packet a lab fault logged on nflog:5 (the
    client's and, with a router, the router's)."""
    rows = _tshark(pcapng, ["-Y", "nflog", "-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch",
                            "-e", "nflog.prefix"])
    return [(int(r[0]), float(r[1]), r[2] if len(r) > 2 else "") for r in rows]


def count(pcap: Path | str, display_filter: str) -> int:
    """How many frames of `pcap` match a Wireshark display filter."""
    return len(_tshark(pcap, ["-Y", display_filter, "-T", "fields", "-e", "frame.number"]))
