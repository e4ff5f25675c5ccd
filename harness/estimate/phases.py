"""The drive behind a measured WAF and the phases of its replay, as the estimator reads them.

A device that preconditions the drive and plays the workload until its own steady state (the sim
backend: kvwear.harness.devices.sim, kvwear.emulator.precondition) reports, beside its counts, which
drive it was (a preset, scaled), how it was preconditioned (its own host, NAND and GC bytes, never
mixed with the workload's), how many passes of the plan it played, and the workload's rounds split
into transient and steady state. `DrivePhases.from_result` reads that from device/LABEL/result.json
(`extra.drive`, `extra.precondition`, `extra.workload`); the estimator then

- expects `passes` × the plan's bytes at the device (the byte identities hold per pass);
- projects lifetime with `lifetime_waf`: the steady-state WAF where the workload reached it, else
  the WAF of its last window of rounds (the nearest to steady state it got), else the whole replay's;
- adds `row()`'s columns to the results row (documented in kvwear.harness.estimate.schema.RESULTS),
  naming the preset and the preconditioning behind every WAF.

Devices that report none of this (fio, QEMU, FEMU) get `None`: one pass, the measured WAF as is.
Must not: read files (the caller hands in the parsed JSON) or compute a WAF from counters itself
beyond the ratios of the counts reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Span:
    """Host and NAND bytes of a stretch of the replay (or of preconditioning)."""

    host_bytes: int
    nand_bytes: int
    rounds: int = 0

    @property
    def waf(self) -> float | None:
        return self.nand_bytes / self.host_bytes if self.host_bytes else None

    @classmethod
    def of(cls, d: Mapping[str, Any] | None) -> Span | None:
        if not d:
            return None
        return cls(int(d["host_bytes"]), int(d["nand_bytes"]), int(d.get("rounds", 0)))


@dataclass(frozen=True)
class DrivePhases:
    """What a device reported about the drive and the replay's phases (module docstring)."""

    preset: str | None                 # the drive preset (None: a geometry given by options)
    drive_note: str                    # how the preset was scaled to the run's capacity
    precondition: str                  # none | fill | steady
    precondition_bytes: Span | None    # everything preconditioning wrote (host, NAND)
    precondition_gc_bytes: int
    precondition_steady: bool | None   # steady: whether the random rounds reached PTS's steady state
    precondition_rounds: int
    passes: int                        # whole passes of the plan the workload played
    stopped: str                       # why the replay stopped (steady state, max rounds, one pass)
    rounds: int                        # whole rounds of the workload
    round_bytes: int
    steady_reached: bool
    steady_round: int | None           # 0-based round closing the first steady window
    transient: Span
    steady: Span | None
    last_window: Span
    window_rounds: int

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> DrivePhases | None:
        """From a device result's JSON (None: the device reported no phases)."""
        extra = result.get("extra") or {}
        work = extra.get("workload")
        if not work:
            return None
        drive = extra.get("drive") or {}
        scale = drive.get("scale") or {}
        pre = extra.get("precondition") or {"mode": "none"}
        ph = work["phases"]
        rnd = pre.get("random") or {}
        transient = Span.of(ph["transient"])
        last = Span.of(ph["last_window"])
        assert transient is not None and last is not None
        return cls(
            preset=drive.get("preset"), drive_note=str(scale.get("note") or drive.get("description") or ""),
            precondition=str(pre.get("mode", "none")),
            precondition_bytes=Span(int(pre["host_bytes"]), int(pre["nand_bytes"])) if "host_bytes" in pre else None,
            precondition_gc_bytes=int(pre.get("gc_bytes") or 0),
            precondition_steady=pre.get("steady_state_reached"), precondition_rounds=int(rnd.get("rounds") or 0),
            passes=int(work["passes"]), stopped=str(work.get("stopped", "")), rounds=int(ph["rounds"]),
            round_bytes=int(ph["round_bytes"]), steady_reached=bool(ph["steady_state_reached"]),
            steady_round=ph.get("steady_state_round"), transient=transient, steady=Span.of(ph.get("steady")),
            last_window=last, window_rounds=int(ph["criterion"]["window_rounds"]))

    def lifetime_waf(self, replay_waf: float | None) -> tuple[float | None, str]:
        """The WAF the lifetime uses and what it is (module docstring)."""
        if self.steady is not None and self.steady.waf is not None and self.steady_round is not None:
            lo = self.steady_round - self.window_rounds + 1
            return self.steady.waf, f"steady state (rounds {lo}–{self.steady_round} of {self.rounds})"
        if self.rounds >= self.window_rounds and self.last_window.waf is not None:
            return self.last_window.waf, (f"last {self.window_rounds} rounds of {self.rounds}: no steady state "
                                          f"({self.stopped})")
        return replay_waf, f"whole replay ({self.rounds} whole rounds, fewer than a {self.window_rounds}-round window)"

    def describe(self) -> str:
        """The drive and preconditioning behind a WAF, in one line (for check notes)."""
        pre = self.precondition
        if pre == "steady":
            pre = "steady (SNIA PTS: 2× sequential fill, random 4 KiB to steady state" + (
                ")" if self.precondition_steady else ", not reached)")
        return f"preset {self.preset or '(options)'}, preconditioned: {pre}; {self.passes} pass(es), {self.stopped}"

    def row(self, replay_waf: float | None) -> dict[str, Any]:
        """The results row's drive and phase columns."""
        source = self.lifetime_waf(replay_waf)[1]
        pb = self.precondition_bytes
        return {
            "drive_preset": self.preset, "drive_scaling": self.drive_note, "precondition": self.precondition,
            "precondition_host_bytes": pb.host_bytes if pb else 0,
            "precondition_nand_bytes": pb.nand_bytes if pb else 0,
            "precondition_gc_bytes": self.precondition_gc_bytes, "precondition_waf": pb.waf if pb else None,
            "precondition_steady": self.precondition_steady, "workload_passes": self.passes,
            "workload_rounds": self.rounds, "waf_replay": replay_waf, "waf_transient": self.transient.waf,
            "waf_steady": self.steady.waf if self.steady is not None else None,
            "steady_state_reached": self.steady_reached, "steady_state_round": self.steady_round,
            "waf_last_window": self.last_window.waf, "waf_lifetime_source": source,
        }
