"""Sweep planning and the results store (pure parts; the Dask and pool runs are in test_sweep_run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvwear.errors import InputError
from kvwear.harness.estimate.schema import ResultsRow
from kvwear.harness.pipeline.sweep import ResultsStore, expand_policy, load_sweep, plan_sweep, point_key


def test_expand_policy_lists_and_ranges() -> None:
    assert expand_policy("lru") == ["lru"]
    assert expand_policy("gandalf:gamma=[0,8]") == ["gandalf:gamma=0", "gandalf:gamma=8"]
    assert expand_policy("lru-k:k=1..3") == ["lru-k:k=1", "lru-k:k=2", "lru-k:k=3"]
    assert expand_policy("x:a=[1,2],b=[u,v]") == ["x:a=1,b=u", "x:a=1,b=v", "x:a=2,b=u", "x:a=2,b=v"]
    with pytest.raises(ValueError, match="key=value"):
        expand_policy("x:oops")


def test_plan_grid_product_and_stable_keys() -> None:
    data = {
        "base": {"name": "s", "workload": {"generator": "multi-round", "params": {"sessions": 3}}},
        "grid": {"models": ["kimi-k3", "qwen3.5-27b"], "dram": ["1GB", "2GB"], "ssd": ["10GB"],
                 "policies": ["lru", "gandalf:gamma=[1,8]"]},
    }
    plan = plan_sweep(data)
    assert len(plan.points) == 2 * 2 * 1 * 3
    assert len({p.key for p in plan.points}) == len(plan.points)
    again = plan_sweep({**data, "base": {**data["base"], "name": "renamed"}})
    assert [p.key for p in again.points] == [p.key for p in plan.points]   # the name does not change keys
    p0 = plan.points[0]
    assert p0.config.policies == (p0.axes["policy"],)
    assert point_key(p0.config) == p0.key


def test_capacities_axis_and_resource_only_for_drives() -> None:
    data = {"base": {"device": {"kind": "block", "target": "/dev/nvme0n1"}},
            "grid": {"capacities": [{"dram": "1GB", "ssd": "9GB"}, {"dram": "3GB", "ssd": "7GB"}],
                     "policies": ["lru"]},
            "sweep": {"replay": True, "drive_resource": "nvme0"}}
    plan = plan_sweep(data)
    assert [p.config.tiers.dram_bytes for p in plan.points] == [10**9, 3 * 10**9]
    assert all(p.resource == "nvme0" for p in plan.points)
    sim = plan_sweep({**data, "base": {}})
    assert all(p.resource == "" for p in sim.points)


@pytest.mark.parametrize(
    ("data", "field"),
    [({"grid": {"speed": [1]}}, "grid.speed"), ({"grid": {"models": []}}, "grid.models"),
     ({"grid": {"policies": ["x:bad"]}}, "grid.policies"), ({"extra": {}}, "extra"),
     ({"grid": {"capacities": [{"dram": "1GB", "disk": "2GB"}]}}, "grid.capacities"),
     ({"sweep": {"replay": "false"}}, "sweep.replay")],
)
def test_bad_sweep_files_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        plan_sweep(data, "s.toml")


def test_load_sweep_toml_error_has_line(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text("[grid]\nmodels = [\n")
    with pytest.raises(InputError, match=r"s\.toml"):
        load_sweep(p)


def test_store_rewrites_by_key_without_duplicates(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.write_error("k1", {"policy": "lru"}, "boom")
    assert store.failed_keys() == {"k1"}
    store.write_result("k1", {"policy": "lru"}, ResultsRow("lru", miss_ratio_tokens=0.5))
    store.write_result("k1", {"policy": "lru"}, ResultsRow("lru", miss_ratio_tokens=0.5))   # a retried task
    store.write_result("k2", {"policy": "lru"}, ResultsRow("lru", miss_ratio_tokens=0.25))
    df = store.read()
    assert sorted(df["point_key"]) == ["k1", "k2"]
    assert store.failed_keys() == set()                        # success clears the earlier error
    assert not list((tmp_path / "results").glob(".*"))         # no partial files left
