import subprocess
import sys


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "lab", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "usage: lab" in out.stdout


def test_unknown_command_fails_with_one_line():
    out = subprocess.run([sys.executable, "-m", "lab", "no-such-command"], capture_output=True, text=True)
    assert out.returncode != 0
