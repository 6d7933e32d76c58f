"""The real endpoint names, made to reach the twin for one client process (unmodified apps).

An app that dials `generativelanguage.googleapis.com` (or a Vertex host), or `api.openai.com` for the
OpenAI Realtime API, with no base URL reaches the twin when, for that process only, the name resolves
to the twin's address, the twin's certificate names it, and the twin's CA is trusted. docs/protocol §10 lists the ways; this module keeps the one
the lab uses, which works the same on every node where the lab is root:

    endpoint_names(protocol)       the names an app of that protocol dials (lab.protocols)
    hosts_text(ip, names)          an /etc/hosts text: loopback lines plus every endpoint name -> ip
    ca_bundle_text(twin_ca_pem)    the system's roots plus the twin's CA (public TLS keeps working)
    isolated_argv(argv, hosts)     `unshare --mount` with the hosts file bind-mounted on /etc/hosts,
                                   so only the app (not the agent, not the rest of the node) sees it

In a container (Compose) `unshare` is not allowed (no CAP_SYS_ADMIN), but the container is the
run's own: `install_in_container()` appends the names to its /etc/hosts and the twin's CA to its
system store instead, and the app runs as it is.

Which one applies is the orchestrator's to say (the node's `own_files`): a host may itself run in a
container, so a guess from inside (/.dockerenv) would rewrite the host's own /etc/hosts.

`HOSTALIASES` cannot do it (glibc ignores names with a dot). Pure text and argv, but
`system_roots()` and `install_in_container()`.
"""
from __future__ import annotations

from pathlib import Path

from lab.protocols import DEFAULT, GEMINI, OPENAI, PROTOCOLS

# Every name an SDK dials for the Live API: the Developer API, Vertex global, a few regional
# Vertex hosts (`{location}-aiplatform`), and the `rep` multi-region forms (protocol §1).
VERTEX_LOCATIONS = ("us-central1", "us-east1", "us-east4", "us-west1", "europe-west1", "europe-west4",
                    "asia-northeast1")
ENDPOINT_NAMES: tuple[str, ...] = (
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    *(f"{loc}-aiplatform.googleapis.com" for loc in VERTEX_LOCATIONS),
    "aiplatform.us.rep.googleapis.com",
    "aiplatform.eu.rep.googleapis.com",
)

# Per protocol (lab.protocols): the Live API's names above; the OpenAI Realtime API's one host, which
# openai-python dials as wss://api.openai.com/v1/realtime when neither base_url nor OPENAI_BASE_URL is set
NAMES: dict[str, tuple[str, ...]] = {GEMINI: ENDPOINT_NAMES, OPENAI: ("api.openai.com",)}


def endpoint_names(protocol: str = DEFAULT) -> tuple[str, ...]:
    """The real hostnames an unmodified app of `protocol` dials."""
    if protocol not in NAMES:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return NAMES[protocol]

# The port those names are dialled on: the SDK builds wss://<name>/... with no port.
ENDPOINT_PORT = 443

SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def hosts_text(ip: str, names: tuple[str, ...] = ENDPOINT_NAMES) -> str:
    """/etc/hosts for the app: loopback resolves as usual, every endpoint name goes to `ip`."""
    if not ip or any(c.isspace() for c in ip):
        raise ValueError(f"bad endpoint address {ip!r}")
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "# livelab: the real endpoint names resolve to the twin for this process only"]
    lines += [f"{ip}\t{name}" for name in names]
    return "\n".join(lines) + "\n"


def system_roots() -> str:
    """The node's CA bundle as PEM text ('' when it has none: then only the twin is trusted)."""
    for p in SYSTEM_BUNDLES:
        path = Path(p)
        if path.is_file():
            return path.read_text()
    try:
        import certifi   # a node without a system bundle: the roots the SDK itself would fall back to
        return Path(certifi.where()).read_text()
    except ImportError:
        return ""


def ca_bundle_text(twin_ca_pem: str, roots: str) -> str:
    """The roots with the twin's CA appended: what SSL_CERT_FILE and REQUESTS_CA_BUNDLE point at."""
    if "BEGIN CERTIFICATE" not in twin_ca_pem:
        raise ValueError("the twin's CA is not a PEM certificate")
    out = roots if not roots or roots.endswith("\n") else roots + "\n"
    return out + "# livelab twin CA\n" + twin_ca_pem.strip() + "\n"


def isolated_argv(argv: list[str], hosts_path: str | Path) -> list[str]:
    """`argv` in its own mount namespace with `hosts_path` on /etc/hosts (needs root on the node)."""
    if not argv:
        raise ValueError("empty command")
    # "$0" is the hosts file, "$@" the app: no shell quoting of the user's command is involved
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts_path), *argv]


def install_in_container(ip: str, twin_ca_pem: str, hosts: Path = Path("/etc/hosts"),
                         store: Path = Path(SYSTEM_BUNDLES[0]), names: tuple[str, ...] = ENDPOINT_NAMES) -> None:
    """The container's own /etc/hosts and system store, extended once (the container is this run's)."""
    comment, *mapped = hosts_text(ip, names).splitlines()[2:]     # without the loopback lines
    present = hosts.read_text().splitlines()
    missing = [ln for ln in mapped if ln not in present]
    if missing:
        with open(hosts, "a") as fh:
            fh.write("".join(ln + "\n" for ln in [comment, *missing]))
    if store.is_file() and twin_ca_pem.strip() not in store.read_text():
        store.write_text(ca_bundle_text(twin_ca_pem, store.read_text()))
