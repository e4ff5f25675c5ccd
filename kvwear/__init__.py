"""kvwear: hardware-in-the-loop SSD wear benchmarking for LLM KV-cache offloading.

The one import namespace. Its own modules are the shared primitives (units, registries, versioned
tables, errors, child processes, locks); the pipeline's stage packages live in the repository's
top-level folders and are installed under this name:

    kvwear.workloads → kvwear.policies → kvwear.harness.plan → kvwear.harness.devices (kvwear.emulator)
    → kvwear.harness.capture / kvwear.harness.wear → kvwear.harness.estimate → kvwear.reports,
    orchestrated by kvwear.harness.pipeline and driven by kvwear.harness.cli.

In a source checkout `kvwear/<stage>` is a symbolic link to the top-level folder; the wheel copies
the folders in (hatch_build.py). The primitives must not import a stage package or hold stage logic.
"""

__version__ = "0.1.0"
