"""The estimate stage: the lifetime estimator and the predicted-vs-measured cross-validation
(`estimator`), the workload WAF model over a plan's page death distances (`waf_model`), and the
results table (`schema`). It reads typed records of the earlier stages; it must not run a device
or know a backend by name."""
