"""The `kvwear` command line: the apps (`apps`), one module per command group, the entry point
(`main`). Commands parse options, call the pipeline, workloads or reports, and print; they must
not hold stage logic."""
