"""Which realtime API a framework's app or host talks to: the one whose key the lab gave it
(lab/peers/app_io.py realtime_api), the lab giving a run's protocol's key alone (lab.clients.command).
The apps cannot import the lab, so their copy of the key variables is kept equal to lab.protocols'."""
import importlib.util
from pathlib import Path

import pytest

from lab.clients.command import app_environment
from lab.protocols import KEY_VARS, PROTOCOLS

APP_IO = Path(__file__).resolve().parents[2] / "lab" / "peers" / "app_io.py"


@pytest.fixture(scope="module")
def app_io():
    spec = importlib.util.spec_from_file_location("app_io_under_test", APP_IO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_apps_key_variables_are_the_labs(app_io):
    assert app_io.KEY_VARS == {p: tuple(v) for p, v in KEY_VARS.items()}
    assert set(app_io.KEY_VARS) == set(PROTOCOLS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_app_the_lab_starts_talks_to_the_runs_protocol(app_io, protocol):
    # the lab's own environment holds every key variable; the app gets its run's protocol's alone
    base = {v: "outer" for vs in KEY_VARS.values() for v in vs}
    env = app_environment(base, api_key="twin-key", ca_bundle="/ca.pem", backend_url="http://127.0.0.1:1",
                          protocol=protocol)
    assert app_io.realtime_api(env) == protocol and app_io.key(protocol, env) == "twin-key"


def test_gemini_reads_either_of_its_variables(app_io):
    assert app_io.realtime_api({"GEMINI_API_KEY": "k"}) == "gemini"
    assert app_io.key("gemini", {"GEMINI_API_KEY": "k"}) == "k"


@pytest.mark.parametrize("env, word", [({}, "neither"), ({"OPENAI_API_KEY": "a", "GOOGLE_API_KEY": "b"}, "both"),
                                       ({"OPENAI_API_KEY": ""}, "neither")])
def test_neither_or_both_keys_is_one_line(app_io, env, word):
    with pytest.raises(SystemExit) as ei:
        app_io.realtime_api(env)
    said = str(ei.value)
    assert said.endswith(f"not {word}") and "$OPENAI_API_KEY" in said and "\n" not in said
