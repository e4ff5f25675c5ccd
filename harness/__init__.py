"""The harness: the stages from the block plan to the estimate, their orchestration and the CLI.

One sub-package per pipeline stage, data flowing one way:

    plan      ssd_ops → block_ops on a device's capacity (layouts, FDP placement)
    devices   play a plan on a device: the embedded FTL (kvwear.emulator.ftl), a file or block
              device through fio, a QEMU/FEMU guest (kvwear.emulator.guest)
    capture   eBPF block tracers
    wear      wear-counter and identify-data readers (SMART, NVMe and vendor logs)
    estimate  the lifetime estimator, the workload WAF model, predicted-vs-measured checks
    pipeline  run configuration, run directories, the stages of `kvwear run`, sweeps
    cli       the `kvwear` command line

A package imports only the ones above it in this list (and kvwear's primitives, workloads,
policies, emulator); pipeline may import every stage and reports; cli may import everything.
Must not hold policy logic (kvwear.policies) or report layout (kvwear.reports).
"""
