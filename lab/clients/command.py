"""`--client-cmd "python my_agent.py"`: a user's own, unmodified app as the client under test.

The app runs inside the client's namespace, as the lab's own clients do, so the scenario's faults hit
its real sockets. It needs no lab import, no base URL and no code change:

- **The endpoint by its real name.** In the app's own mount namespace (in Compose: in the run's
  client container, whose system store then also trusts the twin) /etc/hosts maps the run's
  protocol's hostnames (lab.topology.hostnames.endpoint_names: generativelanguage.googleapis.com and
  the Vertex hosts; api.openai.com) to the twin, the twin's certificate names them and listens on
  443, and $SSL_CERT_FILE / $REQUESTS_CA_BUNDLE point at the system's roots plus the twin's CA. The
  protocol's key variables (lab.protocols.KEY_VARS: $GOOGLE_API_KEY and $GEMINI_API_KEY;
  $OPENAI_API_KEY) hold the twin's key; no protocol's base-URL override reaches the app.
- **The user's lines** arrive on the app's stdin, one line each, at the scenario's times (the
  agent records each as user.say). In a spoken scenario (input: speech) each line is also spoken
  into a microphone the app can open: 16 kHz s16le mono PCM, 100 ms chunks in real time, digital
  silence between lines, on the Unix socket in $LAB_AUDIO_SOCKET (lab/clients/mic.py); the
  user.say is then mode speech. The socket is offered in text scenarios too, silent.
  $LAB_INPUT_MODE says which the user's input is (`text` or `speech`): the lab's framework hosts
  (lab/peers/*_host.py) feed the microphone to the framework in a spoken scenario and leave the
  stdin text, which a speaking user would not have typed, unsent.
- **A proxy in the path.** When the scenario puts the lab's CONNECT proxy between client and
  endpoint (endpoint: {via: proxy}), $HTTPS_PROXY / $https_proxy name it (websockets >= 15, and so
  google-genai, honour them); the proxy maps the API's hostnames to the twin.
- **The backend**: the app books through the local HTTP API in $LAB_BACKEND_URL
  (lab/clients/backend_api.py: POST /book {slot, call_id} answers when the booking commits, as
  the lab's own clients' tool returns; GET /status?slot=).
- It starts in the folder `lab run` was started from (in Compose that folder is mounted read-only at
  /app in the client container: lab.topology.compose.app_mount_file). Its stdout and stderr go to
  client.log in the run folder.

**What a black-box client is judged on** (what the lab sees itself): every connection the twin
saw, its setup, resume attempts and refusals with their close codes, session handles issued, tool
calls and the tool responses that came back by call id, what the model said and when
(lab/clients/twin_observed.py turns twin.jsonl into the lab's events, src `twin-observed`, so the
scenario's anchors fire from the twin's side); the bookings the backend committed; and the packets.
So bookings, all_resumes_refused, refusal_code, resumed, told_truth (from the model's words after
the status question), recovery through a new session (recovered_ms, the `recovered` anchor),
reissued calls and pending calls answered after a resume are all judged.

**What it cannot be judged on**: anything inside the app. When it noticed the loss (loss.detected,
detection_ms), why it retried or gave up, what it showed or played to its user (the model's words
are judged as the twin sent them, not as the app rendered them), the audio it received, and
client-side close reasons, and the `fallback` expectation (it reads the client's own fallback.start,
a decision the twin cannot see: a new session after a loss counts as recovered, not as a
fallback). A connection the twin never saw (a dial that a fault dropped before the
handshake) is only in the capture. Scripted client actions (abort, close, resume) cannot be asked of
it: such a step fails with a step.error and the run goes on.

**The scenario's clock starts at the app's first connection** (the twin's first twin.conn.open from
it, recorded as client.connected with how long the app took): its imports and its framework's
set-up are not part of the scenario, so a step `{at: start, plus: N}` and the duration count from
there (lab/clients/app_start.py). An app that exits before that (within START_GRACE_S: "at once"),
or does not connect within app_start.CONNECT_TIMEOUT_S, ends the run with one line naming its exit
code or the limit, and its last output line.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import signal
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from lab.clients import app_start
from lab.clients.backend_api import BackendAPI
from lab import speech
from lab.clients.base import Client, ClientContext
from lab.clients.mic import MicServer
from lab.clients.twin_observed import SRC, TwinObserver, tail
from lab.errors import LabError
from lab.protocols import BASE_URL_VARS, DEFAULT as DEFAULT_PROTOCOL, KEY_VARS
from lab.topology.hostnames import (ENDPOINT_PORT, ca_bundle_text, endpoint_names, hosts_text, install_in_container,
                                    isolated_argv, system_roots)

class NotAskable(RuntimeError):
    """A scripted client action (resume, close, abort) asked of a black-box app: recorded as the step's
    step.error, and the run goes on (lab.agent)."""


START_GRACE_S = 1.5      # an app that exits sooner than this "exited at once"
STOP_GRACE_S = 5.0       # SIGTERM, then this long, then SIGKILL (to its whole process group)
SPEECH_TAIL_MS = 700     # silence after a spoken line, as the lab's own clients send (lab/clients/sdk.py)

# proxy and base-URL overrides, and every protocol's key, from the lab's own environment must not
# leak into the app: it is given its own protocol's key variables (lab.protocols.KEY_VARS) only
DROPPED_VARS = (*(v for vs in BASE_URL_VARS.values() for v in vs), *(v for vs in KEY_VARS.values() for v in vs),
                "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "LAB_API_KEY")
NO_PROXY_VARS = ("NO_PROXY", "no_proxy")


def parse_command(cmd: str) -> list[str]:
    """The user's command line as argv; one clear LabError for an empty or unparsable one."""
    try:
        argv = shlex.split(cmd or "")
    except ValueError as e:
        raise LabError(f"--client-cmd {cmd!r} cannot be parsed: {e}") from e
    if not argv:
        raise LabError("--client-cmd is empty; give the command that starts your app")
    return argv


def app_environment(base: dict[str, str], *, api_key: str, ca_bundle: str, backend_url: str,
                    speech: bool = False, proxy: str | None = None, protocol: str = DEFAULT_PROTOCOL) -> dict[str, str]:
    """The app's environment: the lab's minus its overrides, plus the key (in `protocol`'s variables),
    trust, the backend URL, the input mode, and the scenario's proxy when it has one."""
    env = {k: v for k, v in base.items() if k not in DROPPED_VARS + NO_PROXY_VARS}
    env.update({k: api_key for k in KEY_VARS[protocol]})
    env.update({"SSL_CERT_FILE": ca_bundle, "REQUESTS_CA_BUNDLE": ca_bundle, "LAB_BACKEND_URL": backend_url,
                "PYTHONUNBUFFERED": "1", "LAB_INPUT_MODE": "speech" if speech else "text"})
    if proxy:
        # the backend API is on loopback: never through the proxy
        env.update({"HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": "localhost,127.0.0.1",
                    "no_proxy": "localhost,127.0.0.1"})
    return env


def stdin_line(text: str) -> bytes:
    """One user line as the app reads it: newlines inside it folded, so a line is always one line."""
    return (" ".join(str(text).splitlines()).strip() + "\n").encode()


class CommandClient(Client):
    name: ClassVar[str] = "command"
    askable: ClassVar[bool] = False

    def __init__(self, ctx: ClientContext, command: str, endpoint_ip: str | None, node_owns_files: bool = False,
                 cwd: str | None = None, proxy: str | None = None,
                 connect_timeout_s: float = app_start.CONNECT_TIMEOUT_S, protocol: str = DEFAULT_PROTOCOL):
        super().__init__(ctx)
        self.names = endpoint_names(protocol)     # the hostnames the app dials, all sent to the twin
        self.protocol = protocol
        self.proxy = proxy      # the scenario's CONNECT proxy (endpoint: {via: proxy}), handed to the app
        self.cwd = cwd      # where the user ran `lab run` (in Compose: that folder, mounted in the container)
        # only the orchestrator knows whether the node's /etc is the run's own (a Compose container)
        # or the host's (a namespace; the host may itself be a container, so no guess from inside)
        self.node_owns_files = node_owns_files
        self.argv = parse_command(command)
        if not endpoint_ip:
            raise LabError("--client-cmd needs the twin's address (an endpoint: twin run)")
        self.endpoint_ip = endpoint_ip
        self.run_dir = Path(ctx.log.path).parent if ctx.log.path else Path(tempfile.mkdtemp(prefix="livelab-cmd-"))
        self.observer = TwinObserver()
        self.api = BackendAPI(ctx.backend)
        self.proc: asyncio.subprocess.Process | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.mic: MicServer | None = None
        self._connected = asyncio.Event()      # the twin saw the app's first connection
        self.connect_timeout_s = connect_timeout_s

    # ---- the twin's record, as the lab's events ------------------------------------------------
    def _observe(self, rec: dict[str, Any]) -> None:
        if rec.get("kind") == "twin.conn.open":
            self._connected.set()
        for kind, fields in self.observer.feed(rec):
            self.ctx.log.write(kind, src=SRC, **fields)

    def _current_conn(self) -> str | None:
        live = [k for k, c in self.observer.conns.items() if not c.ended]
        return self.observer.conn_id(live[-1]) if live else None

    # ---- Client -------------------------------------------------------------------------------
    async def start(self) -> None:
        ca = self.ctx.endpoint.ca_path
        if not ca or not Path(ca).is_file():
            raise LabError("--client-cmd needs the twin's CA certificate (an endpoint: twin run)")
        self._tmp = tempfile.TemporaryDirectory(prefix="livelab-app-")
        tmp = Path(self._tmp.name)
        twin_ca = Path(ca).read_text()
        (tmp / "hosts").write_text(hosts_text(self.endpoint_ip, self.names))
        (tmp / "ca-bundle.pem").write_text(ca_bundle_text(twin_ca, system_roots()))
        # a namespace shares the host's files: the app gets its own /etc/hosts; a container is the
        # run's own, so its /etc/hosts and system store are extended instead (no unshare there)
        if self.node_owns_files:
            install_in_container(self.endpoint_ip, twin_ca, names=self.names)
        argv = self.argv if self.node_owns_files else isolated_argv(self.argv, tmp / "hosts")
        await self.api.start()
        self.mic = MicServer(tmp / "mic.sock")
        await self.mic.start()
        self._tasks.append(asyncio.create_task(tail(self.run_dir / "twin.jsonl", self._observe, self._stop)))
        env = app_environment(dict(os.environ), api_key=self.ctx.endpoint.api_key,
                              ca_bundle=str(tmp / "ca-bundle.pem"), backend_url=self.api.url,
                              speech=self.ctx.speech, proxy=self.proxy, protocol=self.protocol)
        env.update(self.mic.environment)
        self.ctx.log.write("client.params", src="command", client=self.name,
                           params={"command": self.argv, "backend_url": self.api.url,
                                   "audio_socket": str(self.mic.path), "proxy": self.proxy,
                                   "input": "speech" if self.ctx.speech else "text",
                                   "endpoint": f"{self.endpoint_ip}:{ENDPOINT_PORT}"})
        out = open(self.run_dir / "client.log", "ab")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=out,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True, cwd=self.cwd)
        except OSError as e:
            self._start_failed(f"--client-cmd {self.argv[0]!r} cannot start: {e.strerror or e}")
        finally:
            out.close()
        # the scenario's clock starts at the app's first connection, not at its launch (lab/clients/app_start.py)
        started = await app_start.first_connection(self._connected, self.proc.wait(), self.connect_timeout_s)
        if started.outcome != app_start.CONNECTED:
            line = started.error_line(self.connect_timeout_s)
            if started.outcome == app_start.EXITED and started.waited_s < START_GRACE_S:
                line = f"the client command exited at once (exit {started.rc})"
            self._start_failed(f"{line}: {self._last_output_line()} (its output: {self.run_dir / 'client.log'})")
        self.ctx.log.write("client.connected", src="command", conn=self._current_conn(),
                           waited_ms=round(started.waited_s * 1000.0, 1))
        self._tasks.append(asyncio.create_task(self._watch_exit()))

    def _start_failed(self, line: str) -> None:
        # recorded as client.error with task "start": the orchestrator stops the batch with this line
        self.ctx.log.write("client.error", src="command", conn=None, error=line, task="start")
        raise LabError(line)

    def _last_output_line(self) -> str:
        try:
            lines = [ln for ln in (self.run_dir / "client.log").read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        return lines[-1].strip()[:200] if lines else "no output"

    async def _watch_exit(self) -> None:
        rc = await self.proc.wait()
        if self._stop.is_set():
            return
        # watched only once the app connected (start() judges an exit before that)
        self.ctx.log.write("client.error", src="command", conn=self._current_conn(),
                           error=f"the app exited (exit {rc}): {self._last_output_line()}", task="app")

    async def say(self, text: str, line: int) -> None:
        if self.proc is None or self.proc.returncode is not None or self.proc.stdin is None:
            self.ctx.log.write("user.say.failed", src="command", conn=self._current_conn(), line=line,
                               at_ms=self.ctx.log.now_ms())
            raise LabError(f"the app is not running; line {line} was not delivered")
        self.proc.stdin.write(stdin_line(text))
        await self.proc.stdin.drain()
        if not self.ctx.speech:
            self.ctx.log.write("user.say", src="command", conn=self._current_conn(), text=text, line=line, mode="text")
            return
        # spoken: starts at the microphone's next chunk (after any line still being spoken)
        pcm = speech.synth(text) + speech.silence(SPEECH_TAIL_MS)
        ahead_ms = self.mic.stream.speak(pcm)
        self.ctx.log.write("user.say", src="command", conn=self._current_conn(), text=text, line=line,
                           mode="speech", starts_in_ms=ahead_ms, mic_readers=self.mic.readers)

    async def action(self, what: str, **kw: Any) -> None:
        # not a LabError: the run goes on, and what the app then does on its own is what it is judged on
        raise NotAskable(f"the app is a black box (your --client-cmd app, or an agent in its framework): the lab "
                         f"cannot make it {what!r}; its own policy decides")

    def flow(self) -> tuple[str, int, str, int] | None:
        peer = self.observer.open_flow()
        return (peer[0], peer[1], self.endpoint_ip, ENDPOINT_PORT) if peer else None

    async def stop(self) -> None:
        self._stop.set()
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
                except asyncio.TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            except (ProcessLookupError, PermissionError):
                pass
        await asyncio.gather(*self._tasks, return_exceptions=True)   # the tail reads what is left
        for t in self._tasks:
            t.cancel()
        await self.api.stop()
        if self.mic is not None:
            await self.mic.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
