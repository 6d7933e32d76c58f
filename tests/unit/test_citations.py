"""Every study citation in the code ("000 round 3", "001 C", "004 §4", "003 review finding 2")
resolves to a heading of docs/studies.md, where the study and that part of it are summarised."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STUDIES = REPO / "docs" / "studies.md"
# a seed number, then one of the label forms the code uses for a part of that study
CITATION = re.compile(
    r"\b(00[0-4])\b(?:'s)?[ :,(]*(?:records )?"
    r"((?:round|stage|part|finding|review finding)s?\s+\d+"     # round 3, rounds 1, review finding 2
    r"|§\s?(?:\d+|[A-Z][a-z]+(?: [a-z]+){0,4})"                 # §4, §What a client must do
    r"|[A-G]\d?\b"                                               # a scenario letter: C, G2
    r"|other findings|setup|repro|Gotchas)")


def _normal(label: str) -> str:
    label = re.sub(r"^(round|stage|part|finding|review finding)s\b", r"\1", label)
    return re.sub(r"^§\s+", "§", label)


def citations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for pkg in ("lab", "netem"):
        for f in sorted((REPO / pkg).rglob("*")):
            if f.suffix not in (".py", ".yaml") or not f.is_file():
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                for m in CITATION.finditer(line):
                    found.setdefault((m.group(1), _normal(m.group(2))), []).append(f"{f.relative_to(REPO)}:{n}")
    return found


def headings() -> list[str]:
    return [l.lstrip("#").strip() for l in STUDIES.read_text().splitlines() if l.startswith("#")]


def resolves(seed: str, label: str, heads: list[str]) -> bool:
    # the label as a whole token in a heading of that seed ("000 §3 (finding 3): ..." holds both)
    rx = re.compile(rf"(?<![\w§]){re.escape(label)}(?![\w])")
    return any(h.startswith(seed + " ") and rx.search(h[len(seed):]) for h in heads)


def test_the_code_cites_the_studies_by_part():
    # the check below is only worth something while the code does cite parts of the studies
    assert len(citations()) >= 20


def test_every_cited_part_has_a_heading():
    heads = headings()
    missing = {f"{s} {l}": where[:2] for (s, l), where in citations().items() if not resolves(s, l, heads)}
    assert not missing, f"cited in the code, not a heading of docs/studies.md: {missing}"


def test_every_study_has_its_section():
    heads = headings()
    for seed in ("000", "001", "002", "003", "004"):
        assert any(h.startswith(seed + " ") for h in heads), seed


def test_a_label_matches_only_as_a_whole():
    heads = ["000 round 3", "001 G2: barge-in", "000 §3 (finding 3): lockout"]
    assert resolves("000", "round 3", heads) and resolves("000", "finding 3", heads)
    assert not resolves("000", "round 1", ["000 round 12"]) and not resolves("001", "G", heads)
    assert not resolves("001", "round 3", heads)
