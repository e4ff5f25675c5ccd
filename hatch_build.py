"""Wheel build hook: the guest image's build script goes into the wheel beside the stage packages.

The stage folders (workloads/, policies/, emulator/, harness/, reports/) reach the wheel through
kvwear/'s links to them, so an installed kvwear exposes only the name `kvwear`. The one file outside
them that installed code runs is scripts/build-guest.sh (kvwear.emulator.guest finds it at
<package>/scripts/, as in a checkout at <repo>/scripts/). Editable installs get nothing here: they
map `kvwear` to the checkout (dev-mode-exact), where the script already is; a copy in site-packages
would make a second, namespace `kvwear` there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SCRIPTS = ("build-guest.sh",)


class GuestBuildScript(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        for script in SCRIPTS:
            build_data["force_include"][str(Path(self.root) / "scripts" / script)] = f"kvwear/scripts/{script}"
