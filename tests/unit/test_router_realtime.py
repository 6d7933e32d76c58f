"""Whether the router container asks for a real-time budget (lab.topology.compose.router_realtime),
on made-up cgroup trees: the kernel grants one only out of what Docker's parent group has left."""
from pathlib import Path

import yaml

from lab.topology import compose
from lab.topology.compose import ROUTER_RT_FILE, ROUTER_RT_US, router_realtime


def _tree(root: Path, parent: int | None, children: tuple[int, ...] = ()) -> Path:
    cpu = root / "cpu"
    cpu.mkdir()
    (cpu / "cpu.rt_runtime_us").write_text("950000\n")
    if parent is not None:
        (cpu / "docker").mkdir()
        (cpu / "docker" / "cpu.rt_runtime_us").write_text(f"{parent}\n")
        for i, c in enumerate(children):
            (cpu / "docker" / f"c{i}").mkdir()
            (cpu / "docker" / f"c{i}" / "cpu.rt_runtime_us").write_text(f"{c}\n")
    return cpu


def test_without_real_time_group_scheduling_nothing_is_asked_and_nothing_is_missing(tmp_path):
    assert router_realtime(tmp_path / "no-such-controller") == (False, None)


def test_a_parent_with_budget_to_spare_gives_the_router_its_own(tmp_path):
    assert router_realtime(_tree(tmp_path, 400000, (ROUTER_RT_US, 0))) == (True, None)


def test_a_parent_without_budget_is_said_with_where_to_give_it(tmp_path):
    ok, why = router_realtime(_tree(tmp_path, 0))
    assert not ok and "0 us" in why and "docker-setup.sh" in why


def test_a_budget_its_other_containers_hold_is_not_free(tmp_path):
    ok, why = router_realtime(_tree(tmp_path, 3 * ROUTER_RT_US, (ROUTER_RT_US, ROUTER_RT_US, ROUTER_RT_US // 2)))
    assert not ok and f"{ROUTER_RT_US // 2} us" in why


def test_no_docker_group_yet_is_no_budget(tmp_path):
    ok, why = router_realtime(_tree(tmp_path, None))
    assert not ok and why


def test_the_overlay_asks_for_the_budget_the_check_counts():
    router = yaml.safe_load(ROUTER_RT_FILE.read_text())["services"]["router"]
    assert int(router["cpu_rt_runtime"]) == ROUTER_RT_US


def test_the_overlay_is_layered_after_the_router_only_when_granted(monkeypatch):
    for granted in (True, False):
        monkeypatch.setattr(compose, "router_realtime", lambda g=granted: (g, None if g else "why"))
        topo = compose.ComposeTopology("rt-test", project="p1", links=["wifi"], setup=False, log=None)
        files = [Path(f).name for f in topo.files]
        assert files[:2] == ["compose.yaml", "compose.router.yaml"]
        assert ("compose.router-rt.yaml" in files) is granted
        assert topo.router_rt_missing == (None if granted else "why")
