"""The lab image's requirements cover what `python -m lab` imports when it starts.

docker/requirements.txt is the image's list and pyproject.toml the host's; they differ on purpose
(matplotlib, plotly and docker run on the host only). A module the CLI imports at start-up that the image
lacks breaks every service in the Compose and pod topologies ("the twin did not start"), and only an
end-to-end run would show it. This reads the modules the CLI actually loads and asks which
distribution each comes from.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the image leaves these out (see docker/requirements.txt; packaging: release sweeps and their board,
# whose framework clients run in netns on the host only)
HOST_ONLY = {"matplotlib", "plotly", "docker", "packaging"}

_LOADED = r"""
import importlib.metadata as md, json, sys
import lab.cli
lab.cli.build_parser()   # what `python -m lab ...` loads before any subcommand runs
dists = md.packages_distributions()
top = {m.split('.')[0] for m in sys.modules}
used = {d.lower().replace('_', '-') for t in top for d in dists.get(t, ())}
print(json.dumps(sorted(used)))
"""


def _requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.split(r"[<>=!~\[ ]", line, 1)[0].lower().replace("_", "-"))
    return names


def _pyproject_names() -> set[str]:
    text = (REPO / "pyproject.toml").read_text()
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    return {re.split(r"[<>=!~\[ ]", m, 1)[0].lower().replace("_", "-") for m in re.findall(r'"([^"]+)"', block)}


def test_every_distribution_the_cli_loads_is_in_the_image():
    out = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = set(json.loads(out.stdout))
    ours = _pyproject_names()
    missing = (loaded & ours) - _requirement_names(REPO / "docker" / "requirements.txt") - HOST_ONLY
    assert not missing, f"docker/requirements.txt lacks what `python -m lab` imports at start: {sorted(missing)}"


def test_the_image_list_is_the_host_list_minus_host_only_tools():
    image = _requirement_names(REPO / "docker" / "requirements.txt")
    host = _pyproject_names()
    assert host - image == HOST_ONLY
