"""The secret scanner: a planted key is found in every form; a clean folder passes."""
import base64
import gzip
import json
import os
import struct
import subprocess
import sys

from lab.live.scanner import scan

KEY = "AIzaSyTEST-not-a-real-key-0123456789abc"


def _pcapng(payload: bytes, secrets: bytes | None = None) -> bytes:
    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)
    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = block(0x00000001, struct.pack("<HHI", 1, 0, 65535))
    out = shb + idb
    if secrets is not None:
        out += block(0x0000000A, struct.pack("<II", 0x544c534b, len(secrets)) + secrets)
    epb = block(0x00000006, struct.pack("<IIIII", 0, 0, 0, len(payload), len(payload)) + payload)
    return out + epb


def _clean_dir(root):
    run = root / "captures" / "b1-0001"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text(json.dumps({"t": 1, "ms": 2, "src": "client", "kind": "handle.update",
                                                  "conn": 1, "handle_len": 120, "handle_sha": "1a2b3c4d"}) + "\n")
    (run / "capture.pcapng").write_bytes(_pcapng(os.urandom(300)))
    (run / "summary.md").write_text("| b1 | 5 of 5 refused |\n")
    return root / "captures"


def test_clean_folder_passes(tmp_path):
    assert scan(_clean_dir(tmp_path), [KEY]) == []


def test_plain_json_base64_gzip_and_pcap(tmp_path):
    d = _clean_dir(tmp_path)
    (d / "plain.log").write_text(f"x-goog-api-key: {KEY}\n")
    (d / "frame.json").write_text(json.dumps({"url": f"wss://h/ws?key={KEY}&alt=json"}))
    for pre in range(3):   # at every alignment inside a larger base64 blob
        blob = base64.b64encode(b"Authorization-ish prefix"[:pre + 5] + KEY.encode() + b" trailer")
        (d / f"b64-{pre}.txt").write_bytes(blob)
    (d / "b64url.txt").write_bytes(base64.urlsafe_b64encode(b"\xfb\xff" + KEY.encode() + b"\xfe"))
    (d / "events.jsonl.gz").write_bytes(gzip.compress(f'{{"note": "{KEY}"}}\n'.encode()))
    (d / "leak.pcapng").write_bytes(_pcapng(b"GET /ws?key=" + KEY.encode() + b" HTTP/1.1\r\n"))
    pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + os.urandom(40) + KEY.encode() + os.urandom(9)
    (d / "old.pcap").write_bytes(pcap)
    found = {(f.path, f.kind) for f in scan(d, [KEY])}
    assert ("plain.log", "plain") in found
    assert ("frame.json", "plain") in found
    for pre in range(3):
        assert (f"b64-{pre}.txt", "base64") in found
    assert {k for p, k in found if p == "b64url.txt"} & {"base64", "base64url"}  # same core when no +/ in it
    assert ("events.jsonl.gz", "plain") in found
    assert ("leak.pcapng", "plain") in found and ("old.pcap", "plain") in found
    assert not any(f.path.startswith("b1-0001") for f in scan(d, [KEY]))
    assert all(KEY not in str(f) for f in scan(d, [KEY]))


def test_handles_keylogs_and_embedded_tls_secrets(tmp_path):
    d = _clean_dir(tmp_path)
    (d / "frames.jsonl").write_text(json.dumps({"sessionResumptionUpdate": {"newHandle": "Cj" + "x" * 60}}) + "\n")
    (d / "ok.jsonl").write_text(json.dumps({"newHandle": "<handle>", "handle_len": 80}) + "\n")
    (d / "keys.log").write_text("CLIENT_HANDSHAKE_TRAFFIC_SECRET " + "ab" * 32 + " " + "cd" * 48 + "\n")
    (d / "decrypt.pcapng").write_bytes(_pcapng(b"tls bytes", secrets=b"CLIENT_RANDOM " + b"ef" * 32))
    kinds = {(f.path, f.kind) for f in scan(d, [])}
    assert ("frames.jsonl", "handle-field:newHandle") in kinds
    assert not any(p == "ok.jsonl" for p, _ in kinds)
    assert ("keys.log", "tls-keylog") in kinds
    assert ("decrypt.pcapng", "pcapng-secrets") in kinds


def test_lab_scan_exit_codes(tmp_path):
    d = _clean_dir(tmp_path)
    env = {**os.environ, "GEMINI_API_KEY": KEY}
    ok = subprocess.run([sys.executable, "-m", "lab", "scan", str(d)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0 and "clean" in ok.stdout
    (d / "b1-0001" / "oops.txt").write_text(base64.b64encode(KEY.encode()).decode())
    bad = subprocess.run([sys.executable, "-m", "lab", "scan", str(d)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad.returncode == 1 and "oops.txt" in bad.stdout and KEY not in bad.stdout + bad.stderr


KEYLOG = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET " + "ab" * 32 + " " + "cd" * 48 + "\n"
          "SERVER_HANDSHAKE_TRAFFIC_SECRET " + "ab" * 32 + " " + "ef" * 48 + "\n"
          "CLIENT_TRAFFIC_SECRET_0 " + "ab" * 32 + " " + "12" * 48 + "\n")


def _twin_run(root, endpoint="twin", payload=b"\x16\x03\x01 tls bytes"):
    """A run folder whose capture.pcapng carries a real Decryption Secrets Block (editcap --inject-secrets)."""
    run = root / "batch" / "control-probe-01"
    run.mkdir(parents=True)
    pkt = b"\0" * 14 + payload
    pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 1, 0, len(pkt), len(pkt)) + pkt
    (root / "raw.pcap").write_bytes(pcap)
    (root / "keys.log").write_text(KEYLOG)
    subprocess.run(["editcap", "--inject-secrets", f"tls,{root / 'keys.log'}", str(root / "raw.pcap"),
                    str(run / "capture.pcapng")], check=True, capture_output=True)
    (root / "keys.log").unlink()
    (run / "run.json").write_text(json.dumps({"scenario": {"name": "control"}, "endpoint": endpoint}))
    (run / "events.jsonl").write_text(json.dumps({"t": 1, "ms": 2, "src": "client", "kind": "conn.open", "conn": 1}) + "\n")
    return root / "batch", run


def _lab_scan(d, *flags, key=KEY):
    env = {**os.environ, "GEMINI_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "lab", "scan", str(d), *flags], capture_output=True, text=True, env=env)


def test_a_twin_capture_with_only_its_own_secrets_passes_with_allow_tls_secrets(tmp_path):
    batch, run = _twin_run(tmp_path)
    data = (run / "capture.pcapng").read_bytes()
    assert b"CLIENT_TRAFFIC_SECRET_0" in data                 # editcap embedded the key log lines
    kinds = {f.kind for f in scan(batch, [KEY])}
    assert kinds == {"pcapng-secrets"}                        # the lines inside the block are that finding, once
    assert scan(batch, [KEY], allow_tls_secrets=True) == []
    assert _lab_scan(batch).returncode == 1
    ok = _lab_scan(batch, "--allow-tls-secrets")
    assert ok.returncode == 0 and "clean" in ok.stdout, ok.stdout + ok.stderr


def test_allow_tls_secrets_still_fails_on_a_planted_key_or_raw_handle(tmp_path):
    batch, run = _twin_run(tmp_path / "key", payload=b"GET /ws?key=" + KEY.encode() + b" HTTP/1.1\r\n")
    bad = _lab_scan(batch, "--allow-tls-secrets")
    assert bad.returncode == 1 and "capture.pcapng: plain" in bad.stdout and KEY not in bad.stdout + bad.stderr
    batch, run = _twin_run(tmp_path / "handle")
    (run / "frames.jsonl").write_text(json.dumps({"sessionResumptionUpdate": {"newHandle": "Cj" + "x" * 60}}) + "\n")
    bad = _lab_scan(batch, "--allow-tls-secrets")
    assert bad.returncode == 1 and "frames.jsonl: handle-field:newHandle" in bad.stdout
    batch, run = _twin_run(tmp_path / "keylog")
    (run / "sslkeys.txt").write_text(KEYLOG)                  # a key log beside the capture is not its own
    assert {f.kind for f in scan(batch, [], allow_tls_secrets=True)} == {"tls-keylog"}


def test_allow_tls_secrets_never_accepts_a_live_capture(tmp_path):
    batch, _ = _twin_run(tmp_path, endpoint="live")
    assert {f.kind for f in scan(batch, [KEY], allow_tls_secrets=True)} == {"pcapng-secrets"}
    assert _lab_scan(batch, "--allow-tls-secrets").returncode == 1
