"""The plan stage: object-granularity `ssd_ops` become LBA-level `block_ops` on a device of a given
capacity (`planner`: the log, slab and extent layouts) and each write gets an FDP placement handle
(`placement`). Pure computation on tables: it must not issue I/O or know a device backend."""
