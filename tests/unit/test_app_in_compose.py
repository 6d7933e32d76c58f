"""How a --client-cmd app's command line and folder reach the Compose client container."""
from pathlib import Path

from lab.topology.compose import APP_DIR, app_command, app_mount_file


def test_paths_under_the_app_folder_and_the_hosts_python_are_translated(tmp_path):
    root = tmp_path / "proj"
    assert app_command(f"/usr/bin/python3.11 {root}/agent.py --out {root}/x 'a b'", root) == \
        f"python {APP_DIR}/agent.py --out {APP_DIR}/x 'a b'"
    # relative paths, other programs and paths outside the folder are left as they are
    assert app_command("node bot.js /etc/thing", root) == "node bot.js /etc/thing"
    assert app_command(f"{root}x/agent.py", root) == f"{root}x/agent.py"


def test_the_override_mounts_the_folder_read_only_in_the_client_only(tmp_path):
    import yaml

    f = app_mount_file(tmp_path / "my app", tmp_path / "o.yaml")
    doc = yaml.safe_load(f.read_text())
    assert doc == {"services": {"client": {"volumes": [f"{(tmp_path / 'my app').resolve()}:{APP_DIR}:ro"]}}}
