"""The orchestration of a run: its typed configuration, its run directory and stage markers, the
static checks before it starts, the stages of `kvwear run` (simulate, plan, device, estimate,
report) and sweeps of runs. It calls the stage packages; it must not hold their logic (a layout,
a device's protocol, a parser, a formula, a report's layout)."""
