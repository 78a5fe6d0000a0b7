"""The docs site as a reader sees it (marker ``smoke``): it builds with warnings as errors,
and a headless Chromium opens the home page and one tutorial page and finds the math
typeset (MathJax's ``mjx-container`` elements, no raw TeX left in the visible text) and
every image loaded.  A full-page screenshot of each page is kept under
``$SYMTHEORY_CI_ARTIFACTS`` (default ``results/ci/``): the CI artifact.

``SYMTHEORY_DOCS_BUILD=DIR`` reuses a site built into DIR instead of building one."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.smoke

#: the pages opened in the browser: the home page (a figure, inline math in its caption)
#: and a tutorial with display math, inline math and a plot among its executed outputs
PAGES = {"home": "index.html", "tutorial": "tutorials/se_and_gamp.html"}
#: TeX that must not survive typesetting in the visible text
RAW_TEX = re.compile(r"\$\$|\\frac|\\mathbb|\\alpha|\\mathrm|\\sqrt")
#: Chromium as a root process in a sandbox without network (the machine's notes): no
#: sandbox, no GPU, none of the background connections that the closed network refuses
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def _chromium() -> str | None:
    """Debian's Chromium (.ci/run installs it; playwright's own browser download is not
    reachable from CI), else the one playwright installed, if any."""
    return (os.environ.get("SYMTHEORY_CHROMIUM") or shutil.which("chromium")
            or shutil.which("chromium-browser"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("SYMTHEORY_DOCS_BUILD")
    if given:
        out = Path(given)
        assert (out / "index.html").exists(), f"SYMTHEORY_DOCS_BUILD={given} holds no built site"
        return out
    pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html",
                          str(ROOT / "docs"), str(out)],
                         env=env, capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, f"docs build failed (warnings are errors):\n{run.stderr[-6000:]}"
    return out


def test_docs_build_has_every_page(site):
    """The build (with -W) wrote the pages the navigation promises, the API reference
    of every family among them."""
    expected = ["index.html", "changelog.html", "validation.html", "theory/bsr.html",
                "tutorials/bsr_curve.html", "api/glm.html"]
    missing = [p for p in expected if not (site / p).exists()]
    assert not missing, f"pages missing from the build: {missing}"
    # MathJax from the build, not a CDN: CI and offline readers have no network
    assert "_static/mathjax/es5/tex-chtml.js" in (site / "index.html").read_text(), \
        "the site loads MathJax from a CDN: install the docs extra (django-static-mathjax)"
    assert (site / "_static" / "mathjax" / "es5" / "tex-chtml.js").exists()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install -e '.[docs]')")
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium found: apt-get install chromium (as .ci/run does), or set "
                    "SYMTHEORY_CHROMIUM to a Chromium executable")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _artifacts() -> Path:
    out = Path(os.environ.get("SYMTHEORY_CI_ARTIFACTS", ROOT / "results" / "ci"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_renders_math_and_images(site, browser, page):
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    failed = []
    tab.on("requestfailed", lambda r: failed.append(r.url))
    tab.goto((site / PAGES[page]).as_uri(), wait_until="load")
    # MathJax typesets after load: wait for its startup promise, then for every image
    tab.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise",
                          timeout=30000)
    tab.evaluate("MathJax.startup.promise")
    tab.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=30000)
    shot = _artifacts() / f"docs-{page}.png"
    tab.screenshot(path=str(shot), full_page=True)

    typeset = tab.locator("mjx-container").count()
    assert typeset > 0, f"{PAGES[page]}: MathJax typeset nothing (no mjx-container)"
    # the visible text of the article, typeset math excluded (MathJax keeps its source
    # only in hidden assistive markup)
    text = tab.evaluate("""() => {
        const main = document.querySelector('main') || document.body;
        const copy = main.cloneNode(true);
        copy.querySelectorAll('mjx-container, script, style').forEach(e => e.remove());
        return copy.innerText; }""")
    raw = sorted(set(RAW_TEX.findall(text)))
    assert not raw, f"{PAGES[page]}: raw TeX left in the visible text: {raw}"
    images = tab.evaluate("Array.from(document.images).map(i => [i.src, i.complete, i.naturalWidth])")
    assert images, f"{PAGES[page]}: no image on the page (a figure was expected)"
    broken = [src for src, complete, width in images if not (complete and width > 0)]
    assert not broken, f"{PAGES[page]}: broken images: {broken}"
    local_failed = [u for u in failed if u.startswith("file:")]
    assert not local_failed, f"{PAGES[page]}: files of the site failed to load: {local_failed}"
    assert shot.stat().st_size > 10_000, f"screenshot {shot} is empty"
    tab.close()
