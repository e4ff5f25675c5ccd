"""Harness: CLI, config, run directories, planner, device backends, tracers, wear readers,
lifetime estimator and sweep runner.

Must not hold policy logic (that is `policies`) or report layout (that is `reports`).
"""
