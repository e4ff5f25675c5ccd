"""Wall time of README's main job (`kvwear run` with the default config), split by stage.

Runs the default RunConfig (the embedded `sim` device) into a temporary run directory and
prints each stage's wall time from the run's own stage markers, summed per stage kind and per
policy, and the run's CPU seconds. The README promises under two minutes on this machine.
`--policy` (repeatable) and `--sessions` run a smaller form. This bench has no peer: it prints no
ratio.

    .venv/bin/python bench/run.py [--policy lru] [--sessions N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from kvwear.harness.pipeline.config import RunConfig
from kvwear.harness.pipeline.run import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", default=[], help="policy spec, repeatable (default: the config's)")
    ap.add_argument("--sessions", type=int, default=0, help="the generator's sessions (default: the config's)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kvwear-bench-run-"))
    try:
        cfg = RunConfig()
        if args.policy:
            cfg = dataclasses.replace(cfg, policies=tuple(args.policy))
        if args.sessions:
            w = cfg.workload
            params = {**w.params, "sessions": args.sessions}
            cfg = dataclasses.replace(cfg, workload=dataclasses.replace(w, params=params))
        t, c = time.perf_counter(), time.process_time()
        run(cfg, root / "run")
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        markers = [json.loads(p.read_text()) for p in (root / "run" / ".stages").glob("*.json")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    by_kind: dict[str, float] = defaultdict(float)
    by_policy: dict[str, dict[str, float]] = defaultdict(dict)
    for m in markers:
        kind, _, label = m["stage"].partition("/")
        by_kind[kind] += m["elapsed_s"]
        if label:
            by_policy[label][kind] = m["elapsed_s"]
    print(f"kvwear run, default config ({len(cfg.policies)} policies: {', '.join(cfg.policies)}): "
          f"{wall:.1f} s wall, {cpu:.1f} CPU s")
    for kind in ("workload", "simulate", "plan", "device", "estimate", "results", "report"):
        if kind in by_kind:
            print(f"  {kind:<9} {by_kind[kind]:7.2f} s  {by_kind[kind] / wall:6.1%}")
    print("  per policy (simulate / plan / device):")
    for label, st in sorted(by_policy.items()):
        print(f"    {label:<28} {st.get('simulate', 0):6.2f} {st.get('plan', 0):6.2f} {st.get('device', 0):6.2f} s")
    print(f"README target: < 120 s; this run: {wall:.1f} s ({'met' if wall < 120 else 'NOT met'})")


if __name__ == "__main__":
    main()
