"""Render an HTML file in headless Chromium and report which images loaded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

_PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images).map(i => ({alt: i.alt, ok: i.complete && i.naturalWidth > 0,
                                                       w: i.naturalWidth}));
  const pre = document.createElement('pre'); pre.id = 'kvwear-probe';
  pre.textContent = 'PROBE' + JSON.stringify(imgs) + 'ENDPROBE';
  document.body.appendChild(pre);
});
</script>"""


def image_status(html: Path) -> list[dict]:
    """Load `html` (a copy with a probe script) in Chromium; return one record per <img>."""
    assert CHROMIUM, "chromium is not installed (scripts/install-system-deps.sh installs it)"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(html.read_text().replace("</body>", _PROBE + "</body>"))
        out = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp}/profile", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120,
        )
    m = re.search(r'<pre id="kvwear-probe">PROBE(.*?)ENDPROBE</pre>', out.stdout, re.S)
    assert m, f"probe did not run in chromium: {out.stderr[-2000:]}"
    return list(json.loads(m.group(1).replace("&quot;", '"')))
