"""The default model's id is spelt once (lab/model_id.py); the copies that cannot import it agree."""
import re
from pathlib import Path

import yaml

from lab.model_id import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
# apps run in a framework's own venv (or by a user, by hand): no lab import, so a fallback of their own
STANDALONE = ("lab/peers/livekit_app.py", "lab/peers/adk_app.py", "examples/support/app.py")
FALLBACK = re.compile(r"""os\.environ\.get\(\s*["']APP_MODEL["']\s*,\s*["']([^"']+)["']\s*\)""")


def test_the_lab_spells_the_default_model_once():
    spelt = [f"{f.relative_to(REPO)}:{n}" for pkg in ("lab", "netem", "scripts")
             for f in sorted((REPO / pkg).rglob("*")) if f.suffix in (".py", ".sh") and f.is_file()
             for n, line in enumerate(f.read_text().splitlines(), 1)
             if DEFAULT_MODEL in line and f.relative_to(REPO).as_posix() not in ("lab/model_id.py", *STANDALONE)]
    spelt += [f"Makefile:{n}" for n, line in enumerate((REPO / "Makefile").read_text().splitlines(), 1)
              if DEFAULT_MODEL in line]
    assert not spelt, f"ask lab.model_id.DEFAULT_MODEL instead: {spelt}"


def test_the_standalone_apps_fall_back_to_the_same_model():
    for rel in STANDALONE:
        found = FALLBACK.findall((REPO / rel).read_text())
        assert found == [DEFAULT_MODEL], f"{rel}: $APP_MODEL falls back to {found}, not {DEFAULT_MODEL}"


def test_the_twin_serves_the_default_model():
    profile = yaml.safe_load((REPO / "lab/twin/profiles/developer-api.yaml").read_text())
    assert DEFAULT_MODEL in profile["params"]["served_models"]["value"]
