"""The browser check itself (tests/reports/browser.py) on pages made broken one way each: it must
name every fault a reader would see, and pass a page that has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.browser import assert_reads_well

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
FINE = f"""<p id="top">A page that fits.</p><img alt="dot" src="data:image/png;base64,{PNG}" width="40">
<details><summary>more</summary><p>collapsed text that fits</p></details>"""

BROKEN = {
    "a table scrolling in its box": (
        '<div style="overflow-x:auto"><table><tr>' + "<td>column&nbsp;of&nbsp;words</td>" * 40 + "</tr></table></div>",
        "scrolls horizontally"),
    "an image wider than the window": (
        f'<img alt="wide" src="data:image/png;base64,{PNG}" width="1500" height="10">', "px wide in a 1280 px window"),
    "a broken image": ('<img alt="broken" src="data:image/png;base64,AAAA">', "image 'broken' did not load"),
    "a console error": ("<script>console.error('boom')</script>", "console: boom"),
    "a script error": ("<script>undefinedFunction()</script>", "console: ReferenceError"),
    "clipped text": ('<div style="width:60px;overflow:hidden;white-space:nowrap">text that does not fit its box</div>',
                     "px of text in 60 px"),
    "a wide table behind a collapsed section": (
        "<details><summary>all</summary><table><tr>" + "<td>word&nbsp;word&nbsp;word</td>" * 40
        + "</tr></table></details>", "(collapsed sections opened)"),
}


def _page(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "page.html"
    p.write_text(f'<!doctype html><html><head><meta charset="utf-8"></head><body>{body}</body></html>')
    return p


def test_a_page_without_faults_passes(tmp_path: Path) -> None:
    shots = assert_reads_well(_page(tmp_path, FINE), "check-fine", first_screen=("#top",))
    assert [r.screenshots[0].name for r in shots] == ["page-1280px-first-screen.png",
                                                      "page-1280px-details-open-first-screen.png"]
    assert all(p.stat().st_size > 1000 for r in shots for p in r.screenshots)


@pytest.mark.parametrize("fault", list(BROKEN))
def test_each_fault_is_named(tmp_path: Path, fault: str) -> None:
    body, expect = BROKEN[fault]
    with pytest.raises(AssertionError, match="screenshots in") as err:
        # a folder of screenshots per fault: pytest-xdist may run two faults at once
        assert_reads_well(_page(tmp_path, FINE + body), "check-fault-" + "-".join(fault.split()))
    assert expect in str(err.value), str(err.value)


def test_the_first_screen_must_hold_what_it_names(tmp_path: Path) -> None:
    body = '<div style="height:900px"></div><p id="late">below the fold</p>'
    with pytest.raises(AssertionError, match=r"#late ends at \d+ px, below the first 800 px screen"):
        assert_reads_well(_page(tmp_path, body), "check-fold", first_screen=("#late",))
