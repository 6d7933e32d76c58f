"""Every event kind the lab writes is defined in lab.events.EVENT_KINDS, checked without running it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lab
from lab.events import EVENT_KINDS, EventLog

LAB = Path(lab.__file__).parent


def _literal_kinds(node: ast.AST) -> list[str]:
    """The kinds a write's first argument can be: a string, or either side of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literal_kinds(node.body) + _literal_kinds(node.orelse)
    return []


def written_kinds() -> dict[str, str]:
    """kind -> first place in lab/ that writes it: log.write(kind, src=...), backend _write(kind), twin Log(kind)."""
    found: dict[str, str] = {}
    for path in sorted(LAB.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(n, ast.Call) and n.args):
                continue
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            # an EventLog write always names its src; a file's or socket's write does not
            if name == "write" and not any(k.arg == "src" for k in n.keywords):
                continue
            if name in ("write", "_write", "Log"):
                for kind in _literal_kinds(n.args[0]):
                    found.setdefault(kind, f"{path.relative_to(LAB.parent)}:{n.lineno}")
    return found


def test_every_written_kind_is_defined():
    found = written_kinds()
    assert len(found) > 50, "the scan no longer finds the writers"
    undefined = {k: where for k, where in found.items() if k not in EVENT_KINDS}
    assert not undefined, f"kinds written but not in lab.events.EVENT_KINDS: {undefined}"


def test_the_scan_sees_a_misspelling(tmp_path):
    # the scan itself must be able to fail: the same walk over a file with a misspelt kind
    tree = ast.parse('log.write("conn.clsoed", src="client")\nfh.write("text")\nLog("twin.refuse" if x else "twin.bad")')
    kinds = [k for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
             and (getattr(n.func, "attr", None) == "write" and any(k.arg == "src" for k in n.keywords)
                  or getattr(n.func, "id", None) == "Log")
             for k in _literal_kinds(n.args[0])]
    assert sorted(k for k in kinds if k not in EVENT_KINDS) == ["conn.clsoed", "twin.bad"]


def test_every_defined_kind_has_a_writer_and_fields():
    found = written_kinds()
    unused = sorted(k for k in EVENT_KINDS if k not in found)
    assert not unused, f"kinds defined but written nowhere: {unused}"
    assert all(v.writer in ("agent", "client", "backend", "twin") for v in EVENT_KINDS.values())


@pytest.mark.parametrize("kind", ["conn.clsoed", "twin.refuze", "resume.reslt", "step.eror"])
def test_a_misspelt_lab_kind_is_refused(kind):
    log = EventLog()
    with pytest.raises(ValueError, match="unknown event kind .*EVENT_KINDS"):
        log.write(kind, src="client")
    assert log.events == []


def test_a_foreign_namespace_is_recorded():
    # a user's own client may write its own kinds; the twin's kinds are the lab's own and pass
    log = EventLog()
    log.write("myclient.retry", src="client", n=1)
    log.write("twin.refuse", src="twin", code=1011)
    assert [e.kind for e in log.events] == ["myclient.retry", "twin.refuse"]


def test_did_you_mean():
    with pytest.raises(ValueError, match="did you mean conn.closed"):
        EventLog().write("conn.clsoed", src="client")


def test_a_log_that_records_nothing_skips_its_checks(tmp_path):
    # no file, no kept events, no subscriber: nothing can read the event, so nothing is built
    log = EventLog(keep=False)
    assert not log.recording
    assert log.write("conn.clsoed", src="client") is None
    assert log.write("conn.closed", src="client", handle="secret") is None


@pytest.mark.parametrize("to_file, keep, subscribed", [(False, True, False), (True, True, False),
                                                       (True, False, False), (False, False, True)])
def test_every_log_that_records_stays_strict(tmp_path, to_file, keep, subscribed):
    # a test's log (kept), a recorded run's (a file, as `lab twin serve --log` writes), and a log
    # someone listens to refuse a misspelt kind and a secret field as before
    log = EventLog(tmp_path / "e.jsonl" if to_file else None, keep=keep)
    seen = []
    if subscribed:
        log.subscribe(seen.append)
    assert log.recording
    with pytest.raises(ValueError, match="unknown event kind"):
        log.write("twin.refuze", src="twin")
    with pytest.raises(ValueError, match="secret-looking"):
        log.write("twin.setup", src="twin", handle="raw")
    ev = log.write("twin.setup", src="twin", conn=1)
    assert ev is not None and ev.kind == "twin.setup"
    assert seen == ([ev] if subscribed else [])
    assert log.events == ([ev] if keep else [])
    log.close()
    if to_file:
        assert ['"twin.setup"' in line for line in (tmp_path / "e.jsonl").read_text().splitlines()] == [True]
