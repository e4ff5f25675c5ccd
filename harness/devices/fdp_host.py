"""Placement handles on a real NVMe drive for the `block:` backend: is the namespace able to take
them, and the host build of kvwear's directive-write tool that writes them.

fio ≥ 3.34 has FDP (`fdp=1`, io_uring_cmd on /dev/ngXnY) but takes its placement identifiers from
a fixed list per job (`fdp_pli=`), not per I/O from an iolog, so it cannot play a plan whose every
write names its own handle. So on a drive that can, the `block:` backend plays a placed plan with
kvwear-dw (emulator/kvwear_dw.c, the tool the guest runs) on the namespace's generic character
device /dev/ngXnY, NVMe passthrough, each write's handle in its directive fields.

Gate (`fdp_gate`, pure, on nvme-cli's output): the target is an NVMe namespace; its controller
reports Flexible Data Placement (Identify Controller CTRATT bit 19); and the endurance group's FDP
Configurations log (20h, `nvme fdp configs`) has a valid configuration with at least as many
reclaim unit handles as the plan uses. Anything else is a reason, and the backend falls back to
placement none (plain fio writes) and records the reason (`placement_unavailable`), which the
report prints. `fdp_capability` runs the two nvme-cli commands through an injected runner.

`host_dw_binary` compiles the C source with the host's gcc into a cache outside the repository
(~/.cache/kvwear/kvwear-dw/<first 16 hex digits of the source's sha256>/kvwear-dw), once per
source version.

This module decides and builds; it never writes to a device (the backend runs the tool).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvwear.emulator.guest import DW_SOURCE
from kvwear.errors import KvwearError
from kvwear.harness.wear._decode import refusal_from_error
from kvwear.harness.wear.base import CommandRunner
from kvwear.harness.wear.fdp import FdpConfiguration, parse_fdp_configs_binary
from kvwear.harness.wear.identify import ControllerId, parse_id_ctrl_json

# /dev/nvme0n1, /dev/nvme0c1n1 (a multipath path) → controller nvme0, generic device ng0n1
_NAMESPACE = re.compile(r"^nvme(\d+)(?:c\d+)?n(\d+)$")


@dataclass(frozen=True)
class FdpGate:
    """Whether a namespace can take a placed plan; `reason` says why not (empty when it can)."""

    ok: bool
    reason: str
    controller: str | None = None       # /dev/nvmeX
    generic: str | None = None          # /dev/ngXnY, what kvwear-dw opens
    configuration: FdpConfiguration | None = None


def nvme_namespace(block_path: str) -> tuple[str, str] | None:
    """(controller char device, namespace generic char device) of an NVMe namespace block device
    (its kernel name, symlinks resolved), else None."""
    m = _NAMESPACE.match(Path(os.path.realpath(block_path)).name)
    return (f"/dev/nvme{m.group(1)}", f"/dev/ng{m.group(1)}n{m.group(2)}") if m else None


def fdp_gate(ctrl: ControllerId, configs: tuple[FdpConfiguration, ...] | None, handles_needed: int) -> tuple[
        bool, str, FdpConfiguration | None]:
    """Pure: may a plan using `handles_needed` handles (0 … n−1) be played with directives on this
    controller? (ok, reason, the configuration that fits). `configs` None: the log was not read."""
    if not ctrl.fdp_supported:
        return False, (f"the controller ({ctrl.model or 'unnamed'}) does not report Flexible Data Placement "
                       f"(Identify Controller CTRATT {ctrl.ctratt:#x}, bit 19 clear)"), None
    if not configs:
        return False, "the FDP Configurations log (20h) lists no configuration", None
    fits = [c for c in configs if c.valid and c.reclaim_unit_handles >= handles_needed]
    if not fits:
        have = ", ".join(f"#{c.index}: {c.reclaim_unit_handles} handles{'' if c.valid else ' (invalid)'}"
                         for c in configs)
        return False, f"no valid FDP configuration has {handles_needed} reclaim unit handles ({have})", None
    return True, "", fits[0]


def fdp_capability(block_path: str, handles_needed: int, runner: CommandRunner, endgrp_id: int = 1) -> FdpGate:
    """`fdp_gate` for the namespace behind `block_path`, from `nvme id-ctrl` and `nvme fdp
    configs` run through `runner`; a non-NVMe target, a missing nvme-cli or a refused command is a
    reason, never an exception."""
    ns = nvme_namespace(block_path)
    if ns is None:
        return FdpGate(False, f"{block_path} is not an NVMe namespace")
    ctrl_dev, generic = ns
    if not Path(generic).exists():
        return FdpGate(False, f"{generic} (the namespace's generic device, which kvwear-dw opens) does not exist "
                              f"(Linux ≥ 5.13 creates it)", ctrl_dev, generic)
    try:
        ctrl = parse_id_ctrl_json(runner(["nvme", "id-ctrl", ctrl_dev, "-o", "json"]), f"nvme id-ctrl {ctrl_dev}")
        configs: tuple[FdpConfiguration, ...] | None = None
        if ctrl.fdp_supported:
            argv = ["nvme", "fdp", "configs", ctrl_dev, f"--endgrp-id={endgrp_id}", "-o", "binary"]
            configs = parse_fdp_configs_binary(runner(argv), " ".join(argv))
    except FileNotFoundError:
        return FdpGate(False, "nvme-cli is not installed (Debian package nvme-cli)", ctrl_dev, generic)
    except subprocess.CalledProcessError as exc:
        r = refusal_from_error(exc, " ".join(str(a) for a in exc.cmd))
        return FdpGate(False, f"{' '.join(str(a) for a in exc.cmd)}: {r.reason}: {r.message}", ctrl_dev, generic)
    ok, reason, cfg = fdp_gate(ctrl, configs, handles_needed)
    return FdpGate(ok, reason, ctrl_dev, generic, cfg)


def dw_cache_dir() -> Path:
    """$KVWEAR_DW_CACHE, else ~/.cache/kvwear/kvwear-dw."""
    env = os.environ.get("KVWEAR_DW_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kvwear" / "kvwear-dw"


def host_dw_binary() -> Path:
    """kvwear-dw for this host, compiled from this checkout's source with gcc -O2 (dynamically
    linked, unlike the guest's static one; once per source version; a concurrent build of the same
    version is harmless: the rename into place is atomic)."""
    src = DW_SOURCE.read_bytes()
    out = dw_cache_dir() / hashlib.sha256(src).hexdigest()[:16] / "kvwear-dw"
    if out.is_file() and os.access(out, os.X_OK):
        return out
    gcc = shutil.which("gcc")
    if gcc is None:
        raise KvwearError("gcc not found: the host build of kvwear-dw (emulator/kvwear_dw.c) needs it "
                          "(Debian packages gcc, libc6-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        built = Path(tmp) / "kvwear-dw"
        proc = subprocess.run([gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(built), str(DW_SOURCE)],
                              capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise KvwearError(f"gcc could not build kvwear-dw from {DW_SOURCE}: {proc.stderr.strip()[-500:]}")
        os.replace(built, out)
    return out
