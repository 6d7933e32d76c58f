"""Secret scanner for result folders: nothing secret may leave the machine as an artifact.

`scan(dir, secrets)` reads every file under `dir` as bytes (text, JSON, pcap/pcapng, anything;
gzip files are also searched decompressed) and reports a `Finding` for

- `plain`: a secret as is, `hex` (lower/upper), and `base64` / `base64url`: the secret's base64
  in the standard and URL-safe alphabets at each of the three byte alignments, so a key buried
  inside a larger base64 blob (a logged frame, an Authorization header) is still found;
- `handle-field`: a field named `handle`, `new_handle` or `newHandle` with a long string value
  (a raw resumption handle; records hold only its length and hash);
- `tls-keylog`: a TLS key log (SSLKEYLOGFILE lines) in any file, outside a pcapng's secrets block;
- `pcapng-secrets`: a pcapng Decryption Secrets Block (TLS keys embedded by editcap; the key log
  lines inside it are this finding, not a second one).

`allow_tls_secrets=True` accepts the secrets blocks of a twin run's own capture (a pcapng whose
run folder's run.json says `endpoint: twin`: a throw-away CA, nothing real). Everything else is
still searched in that file, the secrets block included: a key or a raw handle there is found, and
a live run's embedded secrets are never accepted.

A finding names the file, the kind, the secret's index and the byte offset, never the secret.
`lab scan DIR` (see lab.live.cli) exits non-zero on any finding. Secrets shorter than 8 bytes
are ignored (they would match by chance).
"""
from __future__ import annotations

import base64
import gzip
import json
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

MIN_SECRET = 8
HANDLE_MIN = 24
MAX_FILE = 512 * 1024 * 1024
HANDLE_RE = re.compile(rb'["\']?\b(new_handle|newHandle|handle)\b["\']?\s*[:=]\s*["\']([^"\'\s,}]{%d,})' % HANDLE_MIN)
KEYLOG_RE = re.compile(rb"^(CLIENT_RANDOM|CLIENT_HANDSHAKE_TRAFFIC_SECRET|SERVER_HANDSHAKE_TRAFFIC_SECRET|"
                       rb"CLIENT_TRAFFIC_SECRET_0|SERVER_TRAFFIC_SECRET_0|EXPORTER_SECRET) [0-9a-fA-F]{32,}", re.M)
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_DSB = 0x0000000A


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str
    offset: int
    secret: int | None = None  # index into the secrets list, never the secret itself
    inner: str = ""            # "gzip" when found in the decompressed content

    def __str__(self) -> str:
        what = self.kind + (f" (secret #{self.secret})" if self.secret is not None else "")
        return f"{self.path}: {what} at byte {self.offset}{' inside gzip' if self.inner else ''}"


def b64_forms(secret: bytes) -> dict[str, list[bytes]]:
    """The base64 substrings that appear whenever `secret` is encoded inside a larger buffer.

    For each alignment k (0, 1, 2 bytes before the secret in its 3-byte group) only the characters
    fully determined by the secret's own bits are kept.
    """
    out: dict[str, list[bytes]] = {"base64": [], "base64url": []}
    n = len(secret)
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + secret).rstrip(b"=")
        first = -(-8 * k // 6)          # ceil(8k/6): first char without pad bits
        last = (8 * (k + n)) // 6       # chars [first, last) depend on the secret only
        core = enc[first:last]
        if len(core) >= MIN_SECRET:
            out["base64"].append(core)
            out["base64url"].append(core.translate(bytes.maketrans(b"+/", b"-_")))
    return out


def secret_forms(secret: str) -> list[tuple[str, bytes]]:
    s = secret.encode()
    forms = [("plain", s), ("hex", s.hex().encode()), ("hex", s.hex().upper().encode())]
    for kind, cores in b64_forms(s).items():
        forms += [(kind, c) for c in cores]
    seen: set[bytes] = set()
    uniq = []
    for kind, f in forms:
        if f not in seen:
            seen.add(f)
            uniq.append((kind, f))
    return uniq


def _secrets_blocks(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each Decryption Secrets Block of a pcapng buffer; [] for anything else."""
    if len(data) < 12 or struct.unpack_from("<I", data, 0)[0] != PCAPNG_SHB:
        return []
    out: list[tuple[int, int]] = []
    endian, off = "<", 0
    while off + 12 <= len(data):
        if struct.unpack_from("<I", data, off)[0] == PCAPNG_SHB:   # each section states its byte order
            bom = data[off + 8:off + 12]
            endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else ""
            if not endian:
                return out
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4:
            return out
        if btype == PCAPNG_DSB:
            out.append((off, off + blen))
        off += blen
    return out


def _search(data: bytes, forms: list[tuple[int, str, bytes]], rel: str, inner: str,
            allow_tls_secrets: bool) -> Iterator[Finding]:
    for idx, kind, needle in forms:
        pos = data.find(needle)
        if pos >= 0:
            yield Finding(rel, kind, pos, idx, inner)
    for m in HANDLE_RE.finditer(data):
        yield Finding(rel, f"handle-field:{m.group(1).decode()}", m.start(), None, inner)
    blocks = _secrets_blocks(data)
    loose = next((m for m in KEYLOG_RE.finditer(data) if not any(a <= m.start() < b for a, b in blocks)), None)
    if loose is not None:
        yield Finding(rel, "tls-keylog", loose.start(), None, inner)
    if blocks and not allow_tls_secrets:
        yield Finding(rel, "pcapng-secrets", blocks[0][0], None, inner)


def _twin_run_file(p: Path) -> bool:
    """True when `p` sits in a run folder whose run.json says the run was against the twin."""
    try:
        return json.loads((p.parent / "run.json").read_text()).get("endpoint") == "twin"
    except (OSError, ValueError, AttributeError):
        return False


def _gunzip(data: bytes) -> bytes | None:
    if data[:2] != b"\x1f\x8b":
        return None
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        try:  # a truncated gzip: take what decompresses
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            return None


def scan(root: Path | str, secrets: list[str], allow_tls_secrets: bool = False) -> list[Finding]:
    """Every finding under `root` (a file or a folder), sorted by path."""
    root = Path(root)
    forms = [(i, kind, f) for i, s in enumerate(secrets) if s and len(s.encode()) >= MIN_SECRET
             for kind, f in secret_forms(s)]
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    out: list[Finding] = []
    for p in files:
        rel = str(p.relative_to(root)) if p != root else p.name
        try:
            if p.stat().st_size > MAX_FILE:
                out.append(Finding(rel, "too-large-to-scan", 0))
                continue
            data = p.read_bytes()
        except OSError:
            out.append(Finding(rel, "unreadable", 0))
            continue
        allowed = allow_tls_secrets and _twin_run_file(p)
        out += _search(data, forms, rel, "", allowed)
        inner = _gunzip(data)
        if inner is not None:
            out += _search(inner, forms, rel, "gzip", allowed)
    return out
