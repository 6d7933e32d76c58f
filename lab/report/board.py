"""The release board: per framework, the conformance rules x its releases, and where an outcome changed.

    board = build(matrix)            # from a matrix.json (lab/report/conformance.py): a JSON-ready dict
    md = render(board)               # board.md
    write(batch)                     # board.md and board.json beside the batch's matrix.json
    compare(old, new)                # the regressions of `new` against `old` (the previous night's)

A pure function of the matrix: the cells whose client is a framework (livekit, livekit@1.8.8,
pipecat@1.13.0, ...) are grouped by framework, and by protocol when one ran on several (`livekit on
openai` beside `livekit on gemini`), and ordered by release (PEP 440, `packaging`). Per
framework, one row per rule (its outcome over every scenario: FAIL if any scenario's cell failed it,
pass if any passed it, n/a when none could judge it) and, below, one row per rule and scenario, each
cell linked to the run folder(s) it was read from. Walking a row from the oldest release, the
release where its judged outcome (n/a is no judgement) differs from the last judged one is a
change: pass -> FAIL a regression, FAIL -> pass a fix; the first change of each row is flagged.

`compare(old, new)` reads two boards: a row that passed at the old board's newest release of a
framework and fails at the new board's newest is a regression. A row new to the board, or judged
for the first time, is no regression: there is nothing it fell from.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.clients.frameworks import FRAMEWORKS
from lab.errors import LabError
from lab.protocols import GEMINI
from lab.report import rules as rules_mod

FORMAT = 1
BOARD_FILES = ("board.md", "board.json")
NOT_RUN_FILE = "not_run.json"   # what the matrix did not run, and why: {"cells": [{scenario, client, why}]}
ALL = "*"       # a rule's row over every scenario
REGRESSION, FIX = "regression", "fix"


def _release(client: str, versions: dict[str, dict[str, str]]) -> tuple[str, str] | None:
    """(framework, release) a matrix client stands for, or None for the lab's own clients. The
    plain name is the pinned release, as its venv measured it (versions.json) when it did."""
    name, _, rel = client.partition("@")
    fw = FRAMEWORKS.get(name)
    if fw is None:
        return None
    if not rel:
        rel = (versions.get(client) or {}).get(fw.package) or fw.pinned
    return name, rel


def _order(rel: str) -> tuple:
    # here, not at the top: the board is the host's (a sweep's), and the lab image, which loads this
    # module with the CLI, leaves packaging out (HOST_ONLY in tests/unit/test_image_requirements.py)
    from packaging.version import InvalidVersion, Version
    try:
        return (0, Version(rel))
    except InvalidVersion:
        return (1, rel)


def _combine(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """A rule over several scenarios' cells: FAIL if one failed it, pass if one passed, else n/a."""
    fail = sum(1 for c in cells if c["status"] == rules_mod.FAIL)
    ok = sum(1 for c in cells if c["status"] == rules_mod.PASS)
    status = rules_mod.FAIL if fail else rules_mod.PASS if ok else rules_mod.NA
    runs = [r for c in cells if c["status"] == status for r in c["runs"]] or [r for c in cells for r in c["runs"]]
    return {"status": status, "pass": ok, "fail": fail, "na": len(cells) - ok - fail, "runs": runs}


def changes(row: dict[str, dict[str, Any]], releases: list[str]) -> list[dict[str, Any]]:
    """Where the row's judged outcome changed, oldest release first."""
    out, last = [], None
    for rel in releases:
        cell = row.get(rel)
        if cell is None or cell["status"] == rules_mod.NA:
            continue
        if last is not None and cell["status"] != last[1]:
            kind = REGRESSION if cell["status"] == rules_mod.FAIL else FIX
            out.append({"release": rel, "since": last[0], "from": last[1], "to": cell["status"], "kind": kind})
        last = (rel, cell["status"])
    return out


def build(matrix: dict[str, Any], not_run: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The board of a matrix (matrix.json's dict); links as the matrix has them (relative to its folder).
    `not_run` (the matrix's not_run.json): a release whose app could not start is a column too, with why."""
    rule_names = [r["name"] for r in matrix["rules"]]
    # a matrix.json from before protocols: every cell Gemini's, every rule of every protocol
    rule_protocols = {r["name"]: r.get("protocols") for r in matrix["rules"]}
    versions = matrix.get("versions") or {}
    # a framework that ran on several protocols (its app speaks each) is a group per protocol, its cells
    # apart as the matrix keeps them: `livekit on openai`; on one protocol, the framework's name
    ran_on: dict[str, set[str]] = {}
    for c in matrix["cells"]:
        found = _release(c["client"], versions)
        if found is not None:
            ran_on.setdefault(found[0], set()).add(c.get("protocol") or GEMINI)

    def group(fw: str, proto: str) -> str:
        return fw if len(ran_on.get(fw, ())) <= 1 else f"{fw} on {proto}"

    protocol_of_group: dict[str, tuple[str, str]] = {}     # group -> (framework, protocol)
    per: dict[str, dict[str, dict[tuple[str, str], dict[str, Any]]]] = {}
    clients: dict[str, dict[str, str]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for n in not_run or []:
        found = _release(n["client"], versions)
        if found is not None:
            name, rel = found
            # a release not run is told under the framework's first protocol (not_run names none)
            proto = min(ran_on.get(name) or {GEMINI})
            fw = group(name, proto)
            protocol_of_group[fw] = (name, proto)
            what = n["why"] if n.get("scenario") is None else f"{n['scenario']}: {n['why']}"
            skipped.setdefault(fw, {}).setdefault(rel, what)
            per.setdefault(fw, {}).setdefault(rel, {})
            clients.setdefault(fw, {})[rel] = n["client"]
    lab_clients: dict[str, set[str]] = {}
    for c in matrix["cells"]:
        found = _release(c["client"], versions)
        proto = c.get("protocol") or GEMINI
        if found is None:
            lab_clients.setdefault(proto, set()).add(c["client"])
            continue
        fw, rel = group(found[0], proto), found[1]
        protocol_of_group[fw] = (found[0], proto)
        clients.setdefault(fw, {})[rel] = c["client"]
        dirs = [r["dir"] for r in c["per_run"]]
        for rule in rule_names:
            agg = c["rules"][rule]
            per.setdefault(fw, {}).setdefault(rel, {})[(rule, c["scenario"])] = {
                "status": agg["status"], "pass": agg["pass"], "fail": agg["fail"], "na": agg["na"], "runs": dirs}
    frameworks = {}
    for fw in sorted(per):
        releases = sorted(per[fw], key=_order)
        scenarios = sorted({s for rel in releases for (_, s) in per[fw][rel]})
        rows = []
        for rule in rule_names:
            whole = {rel: _combine([cell for (r, _), cell in per[fw][rel].items() if r == rule]) for rel in releases
                     if any(r == rule for (r, _) in per[fw][rel])}
            if all(c["status"] == rules_mod.NA for c in whole.values()):
                continue        # no scenario judged the rule at any release: a row of n/a says nothing
            rows.append({"rule": rule, "scenario": ALL, "cells": whole, "changes": changes(whole, releases)})
            for s in scenarios:
                cells = {rel: per[fw][rel][(rule, s)] for rel in releases if (rule, s) in per[fw][rel]}
                if all(c["status"] == rules_mod.NA for c in cells.values()):
                    continue        # nothing judged it on this scenario at any release
                rows.append({"rule": rule, "scenario": s, "cells": cells, "changes": changes(cells, releases)})
        name, proto = protocol_of_group[fw]
        frameworks[fw] = {"framework": name, "protocol": proto, "releases": releases, "clients": clients[fw], "scenarios": scenarios,
                          "rows": rows, "not_run": skipped.get(fw, {}),
                          # n/a in every cell for the protocol's sake, not the runs': named, not silently left out
                          "other_protocols_rules": [r for r in rule_names
                                                    if rule_protocols[r] and proto not in rule_protocols[r]]}
    protocols = matrix.get("protocols") or sorted({c.get("protocol") or GEMINI for c in matrix["cells"]} or {GEMINI})
    return {"format": FORMAT, "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "rules": matrix["rules"], "frameworks": frameworks,
            "protocols": {p: {"frameworks": [fw for fw, f in frameworks.items() if f["protocol"] == p],
                              "lab_clients": sorted(lab_clients.get(p, ()))} for p in protocols}}


_WORD = {rules_mod.PASS: "pass", rules_mod.FAIL: "FAIL", rules_mod.NA: "n/a"}
_FLAG = {REGRESSION: " ▼", FIX: " ▲"}


def _mark(row: dict[str, Any], rel: str) -> str:
    cell = row["cells"].get(rel)
    if cell is None:
        return "-"
    word = _WORD[cell["status"]]
    if row["scenario"] == ALL and cell["status"] != rules_mod.NA:
        word += f" {cell['pass']}/{cell['pass'] + cell['fail']}"
    first = row["changes"][0] if row["changes"] else None
    if first and first["release"] == rel:
        word += _FLAG[first["kind"]]
    return f"[{word}]({cell['runs'][0]})" if cell["runs"] else word


def render(board: dict[str, Any]) -> str:
    lines = ["# livelab release board", "",
             f"Generated {board['generated']} by `lab matrix` from its run folders. Per framework, each conformance "
             "rule at each release: over every scenario (`pass k/n`: passed on k of the n scenarios that judged it), "
             "then per scenario. ▼ marks the first release where a row went from pass to FAIL (a regression), "
             "▲ from FAIL to pass (a fix); n/a is no judgement and changes nothing. Each cell links to a run folder "
             "(a failing one where it failed).", ""]
    if not board["frameworks"]:
        lines += ["No framework ran in this matrix: the board has nothing to show.", ""]
    several = len(board.get("protocols") or ()) > 1
    for proto, part in (board.get("protocols") or {}).items():
        if several and not part["frameworks"]:
            who = ", ".join(part["lab_clients"]) or "none"
            lines += [f"## {proto}", "", f"No framework ran on {proto} in this matrix; its clients here ({who}) are "
                      "the lab's own, at the project's SDK: their cells are in matrix.md.", ""]
    for fw, f in board["frameworks"].items():
        rels = f["releases"]
        proto = f.get("protocol") or GEMINI
        name = f.get("framework") or fw
        lines += [f"## {name} ({proto})", "", "| rule | scenario | " + " | ".join(rels) + " |",
                  "| --- | --- | " + " | ".join("---" for _ in rels) + " |"]
        for row in f["rows"]:
            lines.append(f"| {row['rule']} | {row['scenario']} | " + " | ".join(_mark(row, r) for r in rels) + " |")
        for rel, why in sorted(f.get("not_run", {}).items(), key=lambda kv: _order(kv[0])):
            lines += ["", f"{name} {rel}: not run: {why}"]
        if not f["rows"]:
            lines += ["", "No rule was judged at any release."]
        if f.get("other_protocols_rules"):
            lines += ["", f"n/a on {proto}, rules of another protocol: {', '.join(f['other_protocols_rules'])}."]
        lines += ["", "Changes:", ""]
        found = [(row, ch) for row in f["rows"] for ch in row["changes"]]
        for row, ch in found:
            lines.append(f"- {ch['kind']} at {name} {ch['release']} (since {ch['since']}: {_WORD[ch['from']]} -> "
                         f"{_WORD[ch['to']]}): {row['rule']} on {'every scenario' if row['scenario'] == ALL else row['scenario']}")
        if not found:
            lines.append("- none: every row judged the same at every release")
        lines.append("")
    return "\n".join(lines)


def write(batch: Path) -> tuple[Path, Path]:
    """board.md and board.json in `batch`, from its matrix.json."""
    batch = Path(batch)
    try:
        matrix = json.loads((batch / "matrix.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LabError(f"{batch / 'matrix.json'}: no matrix to build the board from ({type(e).__name__})") from None
    try:
        not_run = json.loads((batch / NOT_RUN_FILE).read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        not_run = []
    board = build(matrix, not_run)
    md, js = (batch / n for n in BOARD_FILES)
    js.write_text(json.dumps(board, indent=2) + "\n")
    md.write_text(render(board))
    return md, js


def load(path: Path) -> dict[str, Any]:
    """A board.json (or the folder holding one); one LabError line when it is not one."""
    path = Path(path)
    if path.is_dir():
        path = path / BOARD_FILES[1]
    try:
        board = json.loads(path.read_text())
    except FileNotFoundError:
        raise LabError(f"{path}: no such board") from None
    except (OSError, json.JSONDecodeError) as e:
        raise LabError(f"{path}: not a board ({type(e).__name__}: {e})") from None
    if not isinstance(board, dict) or board.get("format") != FORMAT or not isinstance(board.get("frameworks"), dict):
        raise LabError(f"{path}: not a board of format {FORMAT}")
    return board


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per regression of `new` against `old`, at each framework's newest release of each."""
    out = []
    for fw, nf in new["frameworks"].items():
        of = old["frameworks"].get(fw)
        if of is None or not of["releases"] or not nf["releases"]:
            continue
        o_rel, n_rel = of["releases"][-1], nf["releases"][-1]
        before = {(r["rule"], r["scenario"]): r["cells"].get(o_rel) for r in of["rows"]}
        for row in nf["rows"]:
            was, now = before.get((row["rule"], row["scenario"])), row["cells"].get(n_rel)
            if was and now and was["status"] == rules_mod.PASS and now["status"] == rules_mod.FAIL:
                where = "every scenario" if row["scenario"] == ALL else row["scenario"]
                out.append(f"{fw}: {row['rule']} on {where}: pass at {o_rel} (before), FAIL at {n_rel} (now); "
                           f"see {now['runs'][0] if now['runs'] else 'the board'}")
    return out


# ---- CLI -------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("board", help="the release board: rules x framework releases from a matrix; compare two boards")
    bsub = p.add_subparsers(dest="board_command", metavar="ACTION", required=True)
    w = bsub.add_parser("write", help="board.md and board.json from a matrix folder (its matrix.json)")
    w.add_argument("dir", type=Path)
    w.set_defaults(func=_cmd_write)
    c = bsub.add_parser("compare", help="exit 1 when NEW regressed against OLD (pass -> FAIL at the newest releases)")
    c.add_argument("old", type=Path, help="the previous board (board.json or its folder)")
    c.add_argument("new", type=Path, help="this board (board.json or its folder)")
    c.set_defaults(func=_cmd_compare)


def _cmd_write(args) -> int:
    md, _ = write(args.dir)
    print(f"board: {md}")
    return 0


def _cmd_compare(args) -> int:
    old, new = load(args.old), load(args.new)
    found = compare(old, new)
    for line in found:
        print(f"regression: {line}")
    newest = ", ".join(f"{fw} {f['releases'][-1]}" for fw, f in new["frameworks"].items() if f["releases"])
    print(f"board compare: {len(found)} regression(s) against {args.old} ({newest or 'no framework'})")
    return 1 if found else 0
