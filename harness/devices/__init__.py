"""Device backends: where a block plan is played (sim FTL, file, block device, QEMU/FEMU guest).

`base` holds the family (typed options, capabilities, the registry); one module per backend
(`sim`, `fio` for file:/block:, `qemu` for qemu/femu); beside them what only backends use: the
fio runner and its JSON parser (`fio_runner`), the iolog writer (`fio_iolog`), deferred trims,
the safety guard (`safety`), device identity (`identity`) and kvwear-dw's plan format
(`directive_plan`). Nothing outside the device stage and preflight should need these modules.
"""
