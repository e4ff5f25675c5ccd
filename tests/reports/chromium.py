"""Render an HTML page in headless Chromium (Debian's package) over the DevTools protocol and
report what a reader would see wrong: horizontal overflow, broken images, console errors,
clipped text; keep screenshots.

The protocol runs over Chromium's `--remote-debugging-pipe` (commands on its fd 3, replies and
events on its fd 4, each a JSON message ended by a NUL byte), so no WebSocket client and no
browser download are needed. Test-only: nothing in kvwear imports it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO = Path(__file__).resolve().parents[2]
# Screenshots of every rendered page (CI keeps its workspace; `out/` is not tracked).
ARTEFACTS = Path(os.environ.get("KVWEAR_TEST_ARTEFACTS", REPO / "out" / "test-artefacts"))

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")


class DevToolsError(RuntimeError):
    pass


class _Pipe:
    """One Chromium process and its DevTools pipe."""

    def __init__(self, profile: Path, timeout_s: float) -> None:
        assert CHROMIUM, "chromium is not installed (scripts/install-system-deps.sh installs it)"
        self.timeout_s = timeout_s
        cmd_r, self._cmd_w = os.pipe()          # we write commands; Chromium reads them on fd 3
        self._evt_r, evt_w = os.pipe()          # Chromium writes replies and events on fd 4

        def pipe_fds() -> None:                 # in the child, before exec: the two ends on fds 3 and 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, evt_w)]
            for want, fd in zip((3, 4), high, strict=True):
                os.dup2(fd, want)              # inheritable: Debian's wrapper script execs the browser

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"], preexec_fn=pipe_fds,
            close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(cmd_r)
        os.close(evt_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def wait_event(self, method: str, session: str | None = None) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == method and e.get("sessionId") == session:
                return e
        while True:
            e = self._read()
            self.events.append(e)
            if e.get("method") == method and e.get("sessionId") == session:
                return e

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._evt_r], [], [], max(left, 0))
            if not ready:
                raise DevToolsError(f"no reply from chromium in {self.timeout_s:.0f} s")
            chunk = os.read(self._evt_r, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise DevToolsError(f"chromium closed its DevTools pipe: {err[-2000:]}")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(msg))

    def close(self) -> None:
        with suppress(DevToolsError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._evt_r)
        if self.proc.stderr:
            self.proc.stderr.close()


@contextmanager
def chromium(timeout_s: float = 120.0) -> Iterator[_Pipe]:
    """A headless Chromium with a fresh empty profile, closed on exit."""
    with tempfile.TemporaryDirectory(prefix="kvwear-chromium-") as tmp:
        pipe = _Pipe(Path(tmp) / "profile", timeout_s)
        try:
            yield pipe
        finally:
            pipe.close()


# What the page looks like to a reader: run in the page after it loaded. An element counts only
# while it is rendered (a closed <details>' content is not); `selectors` name elements whose
# bottom edge is reported (what the first screen holds).
_PROBE = """(selectors) => {
  const W = document.documentElement.clientWidth;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '')
    + (el.textContent ? ' "' + el.textContent.trim().slice(0, 60) + '"' : '');
  const out = {width: W, pageWidth: document.documentElement.scrollWidth, overflow: [], clipped: [],
               images: [], bottoms: {}};
  if (out.pageWidth > W) out.overflow.push(`the page is ${out.pageWidth} px wide in a ${W} px window`);
  for (const el of document.querySelectorAll('body *')) {
    if (el.getClientRects().length === 0) continue;
    const cs = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    // only the outermost element past the right edge (its children are past it too)
    const parent = el.parentElement;
    if (r.right > W + 1 && !(parent && parent.getBoundingClientRect().right > W + 1))
      out.overflow.push(`${name(el)} reaches ${Math.round(r.right)} px`);
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
      if (cs.overflowX === 'auto' || cs.overflowX === 'scroll')
        out.overflow.push(`${name(el)} scrolls horizontally (${el.scrollWidth} px in ${el.clientWidth} px)`);
      else if (cs.overflowX === 'hidden' || cs.overflowX === 'clip' || cs.textOverflow === 'ellipsis')
        out.clipped.push(`${name(el)}: ${el.scrollWidth} px of text in ${el.clientWidth} px`);
    }
    if (el.clientHeight > 0 && el.scrollHeight > el.clientHeight + 1
        && (cs.overflowY === 'hidden' || cs.overflowY === 'clip'))
      out.clipped.push(`${name(el)}: ${el.scrollHeight} px high in ${el.clientHeight} px`);
  }
  for (const img of document.images) {
    const r = img.getBoundingClientRect();
    out.images.push({alt: img.alt, ok: img.complete && img.naturalWidth > 0, naturalWidth: img.naturalWidth,
                     shownWidth: Math.round(r.width)});
  }
  for (const s of selectors) {
    const el = document.querySelector(s);
    out.bottoms[s] = el ? Math.round(el.getBoundingClientRect().bottom + window.scrollY) : null;
  }
  return out;
}"""


@dataclass
class Rendering:
    """What one page showed at one window size, and where its screenshots are."""

    url: str
    width: int
    height: int
    console_errors: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)
    clipped: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    bottoms: dict[str, int | None] = field(default_factory=dict)    # selector → bottom edge, px from the top
    screenshots: list[Path] = field(default_factory=list)

    @property
    def broken_images(self) -> list[str]:
        return [f"image {i['alt']!r} did not load" for i in self.images if not i["ok"]]

    def problems(self) -> list[str]:
        """Everything a reader would see wrong: empty when the page is fine."""
        return [*self.overflow, *self.clipped, *self.broken_images,
                *(f"console: {e}" for e in self.console_errors)]


def _console_errors(events: list[dict[str, Any]], session: str) -> list[str]:
    out = []
    for e in events:
        if e.get("sessionId") != session:
            continue
        p = e.get("params", {})
        match e.get("method"):
            case "Runtime.consoleAPICalled" if p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            case "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(str(d.get("exception", {}).get("description") or d.get("text")))
            case "Log.entryAdded" if p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text")))
    return out


def render(page: Path, artefacts: Path, *, width: int = 1280, height: int = 800,
           selectors: tuple[str, ...] = (), open_details: bool = True) -> list[Rendering]:
    """Load `page` in a `width` × `height` window; look at it as loaded and (with `open_details`,
    when it has collapsed <details>) again with every one opened. Screenshots of the first screen
    and of the whole page go to `artefacts`."""
    artefacts.mkdir(parents=True, exist_ok=True)
    out = []
    with chromium() as b:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            b.send(f"{domain}.enable", session=s)
        b.send("Emulation.setDeviceMetricsOverride",
               {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=s)
        b.send("Page.navigate", {"url": page.resolve().as_uri()}, session=s)
        b.wait_event("Page.loadEventFired", s)
        states = ["as loaded"]
        for state in states:
            if state != "as loaded":
                b.send("Runtime.evaluate", {"expression": "document.querySelectorAll('details').forEach("
                                            "d => d.open = true)"}, session=s)
            probe = b.send("Runtime.evaluate", {"expression": f"({_PROBE})({json.dumps(list(selectors))})",
                                                "returnByValue": True}, session=s)
            if "exceptionDetails" in probe:
                raise DevToolsError(f"the probe failed: {probe['exceptionDetails']}")
            v = probe["result"]["value"]
            r = Rendering(page.resolve().as_uri(), width, height, overflow=v["overflow"], clipped=v["clipped"],
                          images=v["images"], bottoms=v["bottoms"])
            tag = f"{page.stem}-{width}px" + ("" if state == "as loaded" else "-details-open")
            first = b.send("Page.captureScreenshot", {"format": "png"}, session=s)["data"]
            r.screenshots.append(_save(artefacts / f"{tag}-first-screen.png", first))
            size = b.send("Runtime.evaluate", {"expression": "[document.documentElement.scrollWidth, "
                                               "document.documentElement.scrollHeight]", "returnByValue": True},
                          session=s)["result"]["value"]
            whole = b.send("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 16000), "scale": 1}},
                session=s)["data"]
            r.screenshots.append(_save(artefacts / f"{tag}-whole-page.png", whole))
            out.append(r)
            if state == "as loaded" and open_details:
                has = b.send("Runtime.evaluate", {"expression": "document.querySelectorAll('details:not([open])')"
                                                  ".length", "returnByValue": True}, session=s)
                if has["result"]["value"]:
                    states.append("details opened")
        errors = _console_errors(b.events, s)
    for r in out:
        r.console_errors = errors
    return out


def _save(path: Path, data: str) -> Path:
    path.write_bytes(base64.b64decode(data))
    return path


def image_status(html: Path) -> list[dict[str, Any]]:
    """One record per <img> of `html` as Chromium loaded it (ok: decoded with a width)."""
    with tempfile.TemporaryDirectory() as tmp:
        return render(html, Path(tmp), open_details=False)[0].images
