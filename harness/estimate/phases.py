"""What the estimator makes of the drive behind a measured WAF and the phases of its replay.

A device that preconditions the drive and plays the workload until its own steady state (the sim
backend: kvwear.harness.devices.sim, kvwear.emulator.precondition) reports, beside its counts, which
drive it was (a preset, scaled), how it was preconditioned (its own host, NAND and GC bytes, never
mixed with the workload's), how many passes of the plan it played, and the workload's rounds split
into transient and steady state: `ReplayResult.phases`
(kvwear.harness.devices.measurement.DrivePhases). The estimator then

- expects `passes` × the plan's bytes at the device (the byte identities hold per pass);
- projects lifetime with `lifetime_waf`: the steady-state WAF, over every whole round after the
  transient (cut by MSER-5: kvwear.emulator.precondition says why not PTS's 5-round window), saying
  whether PTS's criterion held; with fewer rounds than a window, the whole replay's;
- adds `phase_fields`' values to the results row (documented in kvwear.harness.estimate.schema),
  naming the preset and the preconditioning behind every WAF.

Devices that report none of this (fio, QEMU, FEMU) have no phases: one pass, the measured WAF as is.
Must not: read files or compute a WAF from counters itself beyond the ratios of the counts reported.
"""

from __future__ import annotations

from typing import Any

from kvwear.harness.devices.measurement import DrivePhases


def lifetime_waf(ph: DrivePhases, replay_waf: float | None) -> tuple[float | None, str]:
    """The WAF the lifetime uses and what it is (module docstring)."""
    if ph.steady is not None and ph.steady.waf is not None and ph.steady_from_round is not None:
        pts = (f"PTS's criterion held at round {ph.steady_round}" if ph.steady_round is not None
               else f"PTS's criterion never held: {ph.stopped}")
        return ph.steady.waf, (f"steady state (rounds {ph.steady_from_round}–{ph.rounds - 1} of {ph.rounds}, "
                               f"after a {ph.steady_from_round}-round transient cut by MSER-5; {pts})")
    return replay_waf, f"whole replay ({ph.rounds} whole rounds, fewer than a {ph.window_rounds}-round window)"


def describe(ph: DrivePhases) -> str:
    """The drive and preconditioning behind a WAF, in one line (for check notes)."""
    pre = ph.precondition
    if pre == "steady":
        pre = "steady (SNIA PTS: 2× sequential fill, random 4 KiB to steady state" + (
            ")" if ph.precondition_steady else ", not reached)")
    return f"preset {ph.preset or '(options)'}, preconditioned: {pre}; {ph.passes} pass(es), {ph.stopped}"


def phase_fields(ph: DrivePhases, replay_waf: float | None) -> dict[str, Any]:
    """The results row's drive and phase fields."""
    source = lifetime_waf(ph, replay_waf)[1]
    pb = ph.precondition_bytes
    return {
        "drive_preset": ph.preset, "drive_scaling": ph.drive_note, "precondition": ph.precondition,
        "precondition_host_bytes": pb.host_bytes if pb else 0,
        "precondition_nand_bytes": pb.nand_bytes if pb else 0,
        "precondition_gc_bytes": ph.precondition_gc_bytes, "precondition_waf": pb.waf if pb else None,
        "precondition_steady": ph.precondition_steady, "workload_passes": ph.passes,
        "workload_rounds": ph.rounds, "waf_replay": replay_waf, "waf_transient": ph.transient.waf,
        "waf_steady": ph.steady.waf if ph.steady is not None else None,
        "steady_state_reached": ph.steady_reached, "steady_state_round": ph.steady_round,
        "steady_from_round": ph.steady_from_round,
        "waf_last_window": ph.last_window.waf, "waf_lifetime_source": source,
    }
