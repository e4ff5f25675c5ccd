"""What every adversarial case asserts about the real `kvwear` entry point: run in this process
(kvwear.harness.cli.main.main), it ends with exit status 2 and one line `kvwear: error: ...`;
no exception escapes (that would be a traceback)."""

from __future__ import annotations

import sys

import pytest

from kvwear.harness.cli.main import main


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Run `kvwear ARGV`; return its one error line (without the `kvwear: error: ` prefix)."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["kvwear", *argv])
    with pytest.raises(SystemExit) as exit_:          # any other exception is a traceback
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvwear: error: "), err
    return lines[0].removeprefix("kvwear: error: ")


def succeeds(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Run `kvwear ARGV`, which must exit 0; return what it wrote (stdout + stderr)."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["kvwear", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    return out.out + out.err
