"""CLI command modules; each registers its commands on the apps of `harness.cli`."""
