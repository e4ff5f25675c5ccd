"""Device backends: where a block plan is played (sim FTL, file, block device, QEMU/FEMU guest)."""
