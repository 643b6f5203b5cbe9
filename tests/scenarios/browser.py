"""Headless Chromium for the report tests: what each plot drew, and screenshots.

Only Debian's `chromium` package is available here (no browser downloads), so the tests
drive it from its command line: a probe script appended to a copy of the page waits until
every plot is drawn, then writes what plotly drew into the DOM, and `--dump-dom` prints
that DOM. No browser is a failure with the way to install one, never a skip.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

INSTALL_HINT = ("no Chromium found for the report tests: install Debian's package with "
                "`apt-get update && apt-get install -y chromium` (scripts/test.sh does this when run as root), "
                "or point SHUFFLESIM_CHROMIUM at a Chromium or Chrome binary")
#: A guard against a hung browser, not a speed requirement.
BROWSER_TIMEOUT_S = 180

PROBE = """
<script>
(function () {
  function report() {
    var plots = [];
    document.querySelectorAll('figure.plot').forEach(function (figure) {
      var gd = figure.querySelector('.js-plotly-plot');
      var data = (gd && gd._fullData) || [];
      var visible = data.filter(function (t) { return t.visible === true; });
      plots.push({
        plot: figure.dataset.plot,
        traces: data.length,
        visible: visible.map(function (t) {
          return {name: t.name, type: t.type, points: t.x ? t.x.length : 0};
        }),
        drawn: gd ? gd.querySelectorAll('g.trace').length : 0,
        menus: gd ? gd.querySelectorAll('.updatemenu-container').length : 0
      });
    });
    var pre = document.createElement('pre');
    pre.id = 'probe';
    pre.textContent = JSON.stringify({plotly: typeof Plotly !== 'undefined', plots: plots});
    document.body.appendChild(pre);
  }
  function ready() {
    var divs = document.querySelectorAll('figure.plot .js-plotly-plot');
    return divs.length === document.querySelectorAll('figure.plot').length &&
      Array.prototype.every.call(divs, function (gd) { return gd._fullLayout && gd.querySelector('.main-svg'); });
  }
  var tries = 0;
  (function wait() {
    if (ready() || ++tries > 200) { report(); } else { setTimeout(wait, 50); }
  })();
})();
</script>
"""


TABLE_PROBE = """
<script>
window.addEventListener('load', function () {
  var tables = [];
  document.querySelectorAll('table').forEach(function (table) {
    var box = table.parentElement;
    tables.push({headers: Array.prototype.map.call(table.querySelectorAll('th'), function (th) {
                   return th.textContent; }),
                 right: box.getBoundingClientRect().right,
                 overflow: getComputedStyle(box).overflowX,
                 wider: table.scrollWidth > box.clientWidth});
  });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({window: window.innerWidth, page: document.documentElement.scrollWidth,
                                    tables: tables});
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    """The browser binary, or a test failure saying how to install one."""
    for candidate in (os.environ.get("SHUFFLESIM_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)  # type: ignore[return-value]
    pytest.fail(INSTALL_HINT, pytrace=False)


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=20000", *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {' '.join(command)}", pytrace=False)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"chromium failed (exit {e.returncode}): {e.stderr[-2000:]}", pytrace=False)


def probe_plots(page: Path, work: Path) -> dict[str, Any]:
    """Open a copy of `page` with the probe; what plotly drew per `<figure class="plot">`."""
    return _probe(page, work, PROBE, [])


def probe_tables(page: Path, work: Path, width: int = 1400) -> dict[str, Any]:
    """Open a copy of `page` in a `width`-pixel-wide window: its width and the page's (wider:
    the page scrolls sideways), and per table its headers, the right edge of the box it sits
    in, that box's overflow-x and whether the table is wider than the box."""
    return _probe(page, work, TABLE_PROBE, [f"--window-size={width},2000"])


def _probe(page: Path, work: Path, probe: str, args: list[str]) -> dict[str, Any]:
    """What `probe` wrote into a copy of `page` (as JSON in `<pre id="probe">`)."""
    probed = work / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("</body>", probe + "</body>"))
    dom = _run([*args, "--dump-dom", probed.resolve().as_uri()], work / "profile-dom").stdout
    match = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert match, "the probe wrote nothing: the page's scripts did not run"
    return json.loads(html.unescape(match.group(1)))


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 4200) -> Path:
    """A PNG of the page as a 1400-pixel-wide window shows it."""
    _run([f"--screenshot={png.resolve()}", f"--window-size={width},{height}", page.resolve().as_uri()],
         png.parent / "profile-shot")
    return png
