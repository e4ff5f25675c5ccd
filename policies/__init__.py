"""Policies: the tiered KV-cache simulator (GPU HBM / DRAM / SSD) and one module per placement policy.

Consumes the `requests` table, produces the `ssd_ops` table and metrics. Must not do I/O,
start subprocesses, read the wall clock or keep global state: a simulation is a pure function
of its inputs and seed.
"""
