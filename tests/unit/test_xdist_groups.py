"""`make test`'s parallel split (tests/conftest.py with pytest-xdist --dist loadgroup): a file's
module fixture runs once, on one worker, and independent tests spread over the workers.

Run on a throw-away suite with the project's own conftest, in a child pytest with two workers.
"""
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"

SHARED = '''
import os, pytest

@pytest.fixture(scope="module")
def batch():
    with open(os.environ["SETUPS"], "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    return 1

@pytest.mark.parametrize("i", range(6))
def test_shared(batch, i):
    pass
'''

FREE = '''
import os, time, pytest

@pytest.mark.parametrize("i", range(8))
def test_free(i):
    with open(os.environ["WORKERS"], "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    time.sleep(0.1)
'''


def test_a_module_fixture_runs_once_and_free_tests_spread(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    (suite / "test_shared.py").write_text(SHARED)
    (suite / "test_free.py").write_text(FREE)
    setups, workers = tmp_path / "setups.txt", tmp_path / "workers.txt"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite)],
                          capture_output=True, text=True, timeout=120, cwd=suite,
                          env={"PATH": "/usr/bin:/bin", "SETUPS": str(setups), "WORKERS": str(workers)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert setups.read_text().split() in (["gw0"], ["gw1"]), "the module fixture ran on more than one worker"
    assert set(workers.read_text().split()) == {"gw0", "gw1"}, "independent tests did not spread"
