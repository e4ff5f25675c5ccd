"""Workloads: trace loaders, synthetic generators, model profiles, trace characterization.

Produces the `requests` table (see `kvwear.workloads.schema`). Must not know about tiers, LBAs or
devices.
"""
