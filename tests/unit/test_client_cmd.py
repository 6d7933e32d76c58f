"""The pure parts of `--client-cmd`: the hosts file, the CA bundle, the app's argv and environment,
stdin feeding, the local backend API, and the twin's record read as the lab's events."""
import asyncio
import json

import pytest

from lab.backend import Backend
from lab.clients.backend_api import BackendAPI
from lab.clients.command import app_environment, parse_command, stdin_line
from lab.clients.twin_observed import TwinObserver, parse_peer, tail
from lab.errors import LabError
from lab.events import EVENT_KINDS, EventLog
from lab.topology.hostnames import ENDPOINT_NAMES, ca_bundle_text, hosts_text, isolated_argv

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_hosts_text_maps_every_endpoint_name_and_keeps_localhost():
    text = hosts_text("10.203.7.2")
    rows = [ln.split("\t") for ln in text.splitlines() if ln and not ln.startswith("#")]
    mapped = {name for ip, name in rows if ip == "10.203.7.2"}
    assert mapped == set(ENDPOINT_NAMES)
    assert {"generativelanguage.googleapis.com", "aiplatform.googleapis.com",
            "us-central1-aiplatform.googleapis.com"} <= mapped
    assert ["127.0.0.1", "localhost"] in rows
    with pytest.raises(ValueError):
        hosts_text("10.0.0.1 evil.example")


def test_each_protocol_has_its_names_and_an_openai_app_gets_only_its_own():
    from lab.topology.hostnames import endpoint_names

    assert endpoint_names("gemini") == ENDPOINT_NAMES == endpoint_names()
    assert endpoint_names("openai") == ("api.openai.com",)
    assert not set(endpoint_names("openai")) & set(ENDPOINT_NAMES)
    text = hosts_text("10.203.7.2", endpoint_names("openai"))
    assert "10.203.7.2\tapi.openai.com" in text and "googleapis" not in text
    with pytest.raises(ValueError, match="unknown protocol"):
        endpoint_names("grpc")


def test_an_app_gets_its_protocols_key_and_no_other_protocols_key_or_base_url():
    base = {"PATH": "/bin", "OPENAI_BASE_URL": "https://elsewhere/v1", "OPENAI_API_KEY": "sk-from-the-lab",
            "GOOGLE_API_KEY": "from-the-lab", "GOOGLE_GEMINI_BASE_URL": "https://x"}
    oa = app_environment(base, api_key="twin-key", ca_bundle="/b.pem", backend_url="http://127.0.0.1:5",
                         protocol="openai")
    assert oa["OPENAI_API_KEY"] == "twin-key" and oa["SSL_CERT_FILE"] == "/b.pem"
    assert not {"OPENAI_BASE_URL", "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"} & set(oa)
    gm = app_environment(base, api_key="twin-key", ca_bundle="/b.pem", backend_url="http://127.0.0.1:5")
    assert gm["GOOGLE_API_KEY"] == gm["GEMINI_API_KEY"] == "twin-key"
    assert not {"OPENAI_API_KEY", "OPENAI_BASE_URL"} & set(gm)


def test_ca_bundle_keeps_the_roots_and_adds_the_twin():
    roots = "-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----"
    out = ca_bundle_text(PEM, roots)
    assert out.startswith(roots + "\n") and out.rstrip().endswith(PEM.strip())
    assert ca_bundle_text(PEM, "").count("BEGIN CERTIFICATE") == 1
    with pytest.raises(ValueError):
        ca_bundle_text("not a cert", roots)


def test_isolated_argv_passes_the_command_untouched():
    argv = isolated_argv(["python", "my app.py", "--say", "it's $HOME"], "/tmp/h")
    assert argv[:3] == ["unshare", "--mount", "--propagation"]
    i = argv.index("/tmp/h")
    assert argv[i - 1].startswith("mount --bind")
    assert argv[i + 1:] == ["python", "my app.py", "--say", "it's $HOME"]


def test_parse_command():
    assert parse_command("python my_agent.py --x 'a b'") == ["python", "my_agent.py", "--x", "a b"]
    for bad in ("", "   ", "python 'unclosed"):
        with pytest.raises(LabError):
            parse_command(bad)


def test_app_environment_drops_the_labs_overrides():
    env = app_environment({"PATH": "/bin", "GOOGLE_GEMINI_BASE_URL": "https://x", "HTTPS_PROXY": "http://p",
                           "LAB_API_KEY": "k"}, api_key="twin-key", ca_bundle="/b.pem",
                          backend_url="http://127.0.0.1:5")
    assert env["PATH"] == "/bin" and "GOOGLE_GEMINI_BASE_URL" not in env and "HTTPS_PROXY" not in env
    assert "LAB_API_KEY" not in env
    assert env["GOOGLE_API_KEY"] == env["GEMINI_API_KEY"] == "twin-key"
    assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == "/b.pem"
    assert env["LAB_BACKEND_URL"] == "http://127.0.0.1:5"


def test_stdin_line_is_always_one_line():
    assert stdin_line("Did you book it?") == b"Did you book it?\n"
    assert stdin_line("two\nlines ") == b"two lines\n"


# a B1 run's twin.jsonl, cut down: one session, a tool call, then resumes refused with 1011
TWIN_B1 = [
    {"ms": 10, "kind": "twin.conn.open", "conn": 1, "route": "v1", "peer": "10.0.0.1:39390"},
    {"ms": 11, "kind": "twin.setup", "conn": 1, "resume": False, "route": "v1"},
    {"ms": 300, "kind": "twin.accept", "conn": 1, "session": "s1", "resume": False, "setup_ms": 290.0},
    {"ms": 301, "kind": "twin.handle", "conn": 1, "session": "s1", "handle_len": 48, "handle_sha": "c2e902cd"},
    {"ms": 900, "kind": "twin.tool_call", "conn": 1, "session": "s1", "id": "fc-1", "name": "book_slot",
     "args": {"slot": "tomorrow 3pm"}},
    {"ms": 920, "kind": "twin.tool_response", "conn": 1, "session": "s1", "id": "fc-1", "name": "book_slot",
     "status": "pending"},
    {"ms": 5000, "kind": "twin.conn.open", "conn": 2, "peer": "10.0.0.1:48352"},
    {"ms": 5001, "kind": "twin.setup", "conn": 2, "resume": True, "handle_len": 48},
    {"ms": 5002, "kind": "twin.refuse", "conn": 2, "session": "s1", "code": 1011, "reason": "Internal error",
     "why": "old_connection_open"},
    {"ms": 5600, "kind": "twin.conn.end", "conn": 2, "how": "server_refuse"},
]


def _feed(recs):
    obs = TwinObserver()
    return obs, [ev for r in recs for ev in obs.feed(r)]


def test_twin_record_maps_to_the_labs_events():
    obs, out = _feed(TWIN_B1)
    kinds = [k for k, _ in out]
    assert kinds == ["conn.open", "conn.setup_complete", "handle.update", "tool.call", "tool.response",
                     "conn.open", "resume.attempt", "resume.result", "conn.closed"]
    assert all(k in EVENT_KINDS for k in kinds)
    f = dict(out)
    assert out[0][1] == {"conn": "t1", "purpose": "initial", "local": "10.0.0.1:39390", "twin_ms": 11}
    assert f["tool.call"]["id"] == "fc-1" and f["tool.response"]["status"] == "pending"
    # the refusal reaches the app with the close, so it is written then, with the close's code
    assert out[7] == ("resume.result", {"attempt": 1, "conn": "t2", "ok": False, "code": 1011,
                                        "reason": "Internal error", "twin_ms": 5600})
    assert out[8][1]["by"] == "server" and out[8][1]["code"] == 1011
    # the first connection is still open (a silent loss): flow() targets it
    assert obs.open_flow() == ("10.0.0.1", 39390)


def test_accepted_resume_new_session_said_lines_and_goaway():
    _, out = _feed(TWIN_B1[:3] + [
        {"ms": 400, "kind": "twin.say", "conn": 1, "text": "Booked."},
        {"ms": 500, "kind": "twin.goaway", "conn": 1, "time_left": "5s"},
        {"ms": 600, "kind": "twin.conn.end", "conn": 1, "how": "close_frame"},
        {"ms": 700, "kind": "twin.setup", "conn": 2, "resume": True},
        {"ms": 800, "kind": "twin.accept", "conn": 2, "resume": True, "setup_ms": 100.0},
        {"ms": 900, "kind": "twin.setup", "conn": 3, "resume": False},
        {"ms": 950, "kind": "twin.accept", "conn": 3, "resume": False, "setup_ms": 50.0},
    ])
    kinds = [k for k, _ in out]
    assert kinds[2:] == ["model.text", "model.turn_complete", "conn.go_away", "conn.closed", "conn.open",
                         "resume.attempt", "conn.setup_complete", "resume.result", "conn.open",
                         "conn.setup_complete", "session.restored"]
    by_kind = {k: v for k, v in out}
    assert by_kind["model.text"]["text"] == "Booked."
    assert by_kind["resume.result"]["ok"] is True and by_kind["resume.result"]["latency_ms"] == 100.0
    assert [v["purpose"] for k, v in out if k == "conn.open"] == ["initial", "resume", "new"]
    assert [v["by"] for k, v in out if k == "conn.closed"] == ["client"]


def test_parse_peer():
    assert parse_peer("10.0.0.1:5") == ("10.0.0.1", 5)
    assert parse_peer("[::1]:7") == ("::1", 7)
    assert parse_peer(None) is None and parse_peer("nope") is None


def test_tail_reads_whole_lines_and_what_is_left_at_stop(tmp_path):
    path = tmp_path / "twin.jsonl"
    seen = []

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(tail(path, seen.append, stop, poll_s=0.01))
        await asyncio.sleep(0.03)                   # the file does not exist yet
        with open(path, "w") as fh:
            fh.write(json.dumps({"kind": "a"}) + "\n" + '{"kind": "b"')   # b is half-written
            fh.flush()
            await asyncio.sleep(0.05)
            assert seen == [{"kind": "a"}]
            fh.write("}\n")
        stop.set()
        await task

    asyncio.run(main())
    assert seen == [{"kind": "a"}, {"kind": "b"}]


def test_backend_api_books_idempotently_and_reports_status():
    async def main():
        log = EventLog()
        api = BackendAPI(Backend(log, commit_after_s=0.05))
        body = {"slot": "tomorrow 3pm", "call_id": "fc-1", "wait": False}
        st, a = await api.handle("POST", "/book", json.dumps(body).encode())
        assert (st, a) == (200, {"status": "pending", "job": "J1", "slot": "tomorrow 3pm"})
        assert (await api.handle("GET", "/status?slot=tomorrow%203pm", b""))[1] == {"status": "pending"}
        # by default the answer waits for the commit, as the lab's own clients' tool does
        st2, b = await api.handle("POST", "/book", b'{"slot": "3 p.m. tomorrow", "call_id": "fc-2"}')
        assert (st2, b) == (200, {"status": "booked", "job": "J1", "slot": "tomorrow 3pm"})
        assert (await api.handle("GET", "/status?slot=tomorrow%203pm", b""))[1] == {"status": "booked"}
        assert (await api.handle("POST", "/book", b"[1]"))[0] == 400
        assert (await api.handle("POST", "/book", b"{oops"))[0] == 400
        assert (await api.handle("GET", "/nope", b""))[0] == 404
        assert [e.get("call_id") for e in log.find("backend.request")] == ["fc-1"]
        assert [e.get("id") for e in log.find("tool.dedup")] == ["fc-2"]

    asyncio.run(main())


def test_backend_api_over_a_real_socket():
    async def main():
        api = await BackendAPI(Backend(EventLog(), commit_after_s=10)).start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", api.port)
            body = b'{"slot": "friday 9am", "wait": false}'
            w.write(b"POST /book HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await w.drain()
            raw = await r.read()
            w.close()
        finally:
            await api.stop()
        head, _, payload = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and json.loads(payload)["job"] == "J1"

    asyncio.run(main())


def test_a_framework_without_its_venv_is_one_line(tmp_path):
    from lab.clients.frameworks import resolve

    fw = resolve("livekit")
    with pytest.raises(LabError) as err:
        fw.check(tmp_path)
    assert ".venv-livekit" in str(err.value) and "peers-setup" in str(err.value)
    (tmp_path / ".venv-livekit" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-livekit" / "bin" / "python").write_text("")
    fw.check(tmp_path)
    # the app is told every parameter its framework declares (lab/clients/frameworks), here the defaults
    assert parse_command(fw.command(tmp_path))[:3] == [str(tmp_path / ".venv-livekit/bin/python"),
                                                        str(tmp_path / "lab/peers/livekit_app.py"), "--params"]


def test_install_in_container_extends_hosts_and_store_once(tmp_path):
    from lab.topology.hostnames import install_in_container

    hosts, store = tmp_path / "hosts", tmp_path / "ca.crt"
    hosts.write_text("127.0.0.1\tlocalhost\n172.18.0.3\tclient\n")
    store.write_text("-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----\n")
    for _ in range(2):
        install_in_container("172.18.0.2", PEM, hosts=hosts, store=store)
    text = hosts.read_text()
    assert text.startswith("127.0.0.1\tlocalhost\n172.18.0.3\tclient\n")
    assert text.count("172.18.0.2\tgenerativelanguage.googleapis.com") == 1
    assert store.read_text().count("BEGIN CERTIFICATE") == 2 and "ROOT" in store.read_text()
    # another protocol's names go in beside them (compared line by line, not by the shared comment)
    install_in_container("172.18.0.2", PEM, hosts=hosts, store=store, names=("api.openai.com",))
    text = hosts.read_text()
    assert text.count("172.18.0.2\tapi.openai.com") == 1
    assert text.count("172.18.0.2\tgenerativelanguage.googleapis.com") == 1


def test_an_app_is_told_the_input_mode_and_the_scenarios_proxy():
    from lab.clients.command import app_environment
    base = {"PATH": "/bin", "HTTPS_PROXY": "http://lab-own:1", "NO_PROXY": "*"}
    plain = app_environment(base, api_key="k", ca_bundle="/ca", backend_url="http://127.0.0.1:9")
    assert plain["LAB_INPUT_MODE"] == "text" and "HTTPS_PROXY" not in plain and "NO_PROXY" not in plain
    env = app_environment(base, api_key="k", ca_bundle="/ca", backend_url="http://127.0.0.1:9", speech=True,
                          proxy="http://10.0.0.2:8080")
    assert env["LAB_INPUT_MODE"] == "speech"
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://10.0.0.2:8080"
    assert "127.0.0.1" in env["NO_PROXY"].split(",")     # the backend API stays off the proxy


def test_a_scripted_client_action_is_not_asked_of_an_app_and_the_run_goes_on():
    """b2's `action: close` / `action: resume` are the probe's: a black-box app is judged on what its own
    policy does when the path returns, so the step is recorded as failed and never ends the run."""
    import asyncio

    from lab.clients.command import CommandClient, NotAskable
    from lab.errors import ONE_LINE_ERRORS

    app = CommandClient.__new__(CommandClient)
    with pytest.raises(NotAskable) as e:
        asyncio.run(app.action("resume"))
    assert not isinstance(e.value, ONE_LINE_ERRORS) and "its own policy decides" in str(e.value)
