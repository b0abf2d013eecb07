"""The explorer's page in a real browser: Debian's chromium, headless, driven by
Selenium through chromium-driver (scripts/setup.sh installs both), the page
opened from file:// as `qkv explore` writes it.

Checked: no console error; the lines drawn for a layer and head are the
weights in the file (read back from the DOM's data- attributes); switching
layer and heads redraws them; hovering a token leaves only its lines; a model
view thumbnail opens its head; the tutorial view's numbers are the weights;
a screenshot of each view is saved and is not blank. The live page that
`qkv serve` serves at /explore redraws from its endpoint's JSON.

QKV_SCREENSHOT_DIR=docs/images keeps the screenshots (the README's pictures):
    QKV_SCREENSHOT_DIR=docs/images PYTHONPATH=python .venv/bin/python -m pytest -q \
        python/tests/test_explore_browser.py
"""

import base64
import os
import pathlib
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest

import qkv
from model_files import MINILM, SMOLLM2_GGUF, needs_minilm, needs_smollm2

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)")

TEXT = "The cat sat on the mat."
TEXT_B = "It was tired."

# The DOM's drawn lines: (layer, head, query, key, weight as the page wrote it, shown).
LINES_JS = """
return [...document.querySelectorAll('#head-svg line[data-query]')].map(l => [
  +l.dataset.layer, +l.dataset.head, +l.dataset.query, +l.dataset.key, +l.dataset.weight,
  +l.getAttribute('stroke-opacity'), getComputedStyle(l).display !== 'none']);
"""


# The PNG decoded by the browser itself: [width, height, share of non-white
# pixels, distinct colours among every 7th pixel].
PNG_STATS_JS = """
const done = arguments[arguments.length - 1];
const img = new Image();
img.onload = () => {
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let nonWhite = 0; const colours = new Set();
  for (let p = 0; p < d.length; p += 4) {
    if (d[p] < 240 || d[p + 1] < 240 || d[p + 2] < 240) nonWhite++;
    if (p % 28 === 0) colours.add((d[p] << 16) | (d[p + 1] << 8) | d[p + 2]);
  }
  done([c.width, c.height, nonWhite / (c.width * c.height), colours.size]);
};
img.onerror = () => done(null);
img.src = 'data:image/png;base64,' + arguments[0];
"""


def check_not_blank(browser, path):
    png = open(path, "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    stats = browser.execute_async_script(PNG_STATS_JS, base64.b64encode(png).decode())
    assert stats is not None, f"{path} does not decode"
    width, height, non_white, colours = stats
    assert width > 100 and height > 100 and non_white > 0.02 and colours > 20, (path, stats)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1300", "--force-device-scale-factor=1"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


def open_page(browser, attention, path):
    attention.save(path)
    browser.get("file://" + str(path))
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def shot(browser, view, tmp_path):
    path = tmp_path / f"explore_{view}.png"
    browser.find_element(By.ID, f"{view}-view").screenshot(str(path))
    check_not_blank(browser, path)
    keep = os.environ.get("QKV_SCREENSHOT_DIR")
    if keep:
        shutil.copy(path, os.path.join(keep, path.name))


def drawn(browser):
    return browser.execute_script(LINES_JS)


def check_lines(a, lines, layer, heads):
    """The lines are exactly the allowed (query, key) pairs of `heads` at `layer`,
    each carrying the file's weight as its data-weight and opacity."""
    want = {(h, i, j) for h in heads for i, j in zip(*np.nonzero(~a.masked[layer, h]))}
    assert {(h, i, j) for (_, h, i, j, *_) in lines} == want
    for l_, h, i, j, weight, opacity, _ in lines:
        assert l_ == layer
        assert np.float32(weight) == a.weights[layer, h, i, j]
        assert np.float32(opacity) == a.weights[layer, h, i, j]


@needs_minilm
def test_views_draw_the_weights_in_the_file(browser, tmp_path):
    a = qkv.explore(MINILM, TEXT, TEXT_B, pad_to=16)
    open_page(browser, a, tmp_path / "attention.html")
    layers, heads, n, _ = a.weights.shape

    # Head view: layer 0, every head.
    check_lines(a, drawn(browser), 0, range(heads))
    Select(browser.find_element(By.ID, "layer")).select_by_value("3")
    check_lines(a, drawn(browser), 3, range(heads))
    token = browser.find_element(By.CSS_SELECTOR, 'text.query[data-index="2"]')
    ActionChains(browser).move_to_element(token).perform()
    shot(browser, "head", tmp_path)  # query "cat" of every head, padding masked
    ActionChains(browser).move_by_offset(0, 400).perform()

    # The pair filter: text's queries reading the second text's keys only.
    Select(browser.find_element(By.ID, "pair-filter")).select_by_value("0-1")
    lines = drawn(browser)
    assert lines and all(a.segments[i] == 0 and a.segments[j] == 1 for (_, _, i, j, *_) in lines)
    Select(browser.find_element(By.ID, "pair-filter")).select_by_value("all")
    check_lines(a, drawn(browser), 3, range(heads))

    # Heads: double-click shows one alone, a click adds another.
    box = lambda h: browser.find_element(By.CSS_SELECTOR, f'.head-box[data-head="{h}"]')
    ActionChains(browser).double_click(box(5)).perform()
    check_lines(a, drawn(browser), 3, [5])
    box(2).click()
    check_lines(a, drawn(browser), 3, [2, 5])

    # Hovering query token 4 leaves its lines only; the padding keys show as masked.
    token = browser.find_element(By.CSS_SELECTOR, 'text.query[data-index="4"]')
    ActionChains(browser).move_to_element(token).perform()
    lines = drawn(browser)
    shown = {(h, i, j) for (_, h, i, j, _, _, visible) in lines if visible}
    assert shown == {(h, 4, j) for h in (2, 5) for j in np.nonzero(~a.masked[3, h, 4])[0]}
    masked_keys = browser.execute_script(
        "return [...document.querySelectorAll('text.key.masked')].map(t => +t.dataset.index)")
    assert masked_keys == list(np.nonzero(a.masked[3, 2, 4])[0]) and masked_keys
    ActionChains(browser).move_by_offset(0, 400).perform()
    assert all(visible for *_, visible in drawn(browser))

    # Model view: every layer x head; a click opens that head in the head view.
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="model"]').click()
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#model-grid canvas")
    assert len(thumbs) == layers * heads
    shot(browser, "model", tmp_path)
    browser.find_element(By.CSS_SELECTOR, '#model-grid canvas[data-layer="4"][data-head="7"]').click()
    assert browser.find_element(By.ID, "head-view").is_displayed()
    check_lines(a, drawn(browser), 4, [7])

    # Tutorial view: one query's scores, scaled scores, weights and weighted sum.
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="tutorial"]').click()
    layer, head, query = 2, 6, 3
    Select(browser.find_element(By.ID, "t-layer")).select_by_value(str(layer))
    Select(browser.find_element(By.ID, "t-head")).select_by_value(str(head))
    Select(browser.find_element(By.ID, "t-query")).select_by_value(str(query))
    rows = browser.execute_script("""
      return [...document.querySelectorAll('#t-table tbody tr')].map(r => [
        +r.dataset.key, r.dataset.masked === '1', +r.dataset.weight, +r.dataset.score,
        [...r.cells].map(c => c.textContent)]);""")
    assert len(rows) == n
    scale = a.scales[layer]
    for j, masked, weight, score, cells in rows:
        assert masked == a.masked[layer, head, query, j]
        assert np.float32(weight) == a.weights[layer, head, query, j]
        assert np.float32(score) == a.scores[layer, head, query, j]
        assert cells[1] == a.tokens[j]
        assert float(cells[2]) == pytest.approx(float(a.scores[layer, head, query, j]), abs=1e-4)
        assert float(cells[3]) == pytest.approx(float(a.scores[layer, head, query, j]) * scale,
                                                abs=1e-4)
        if masked:
            assert cells[5] == "masked"
        else:
            assert float(cells[5]) == pytest.approx(float(a.weights[layer, head, query, j]),
                                                    abs=1e-4)
    kv = head // (heads // a.values.shape[1])
    want = a.weights[layer, head, query].astype(np.float64) @ a.values[layer, kv]
    shown = browser.execute_script(
        "return [...document.querySelectorAll('#t-sum span')].map(s => +s.textContent)")
    np.testing.assert_allclose(shown, want, atol=1e-4)
    shot(browser, "tutorial", tmp_path)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


@needs_smollm2
def test_decoder_page_draws_the_causal_mask(browser, tmp_path):
    a = qkv.explore(SMOLLM2_GGUF, "The capital of France is Paris.")
    open_page(browser, a, tmp_path / "smollm2.html")
    check_lines(a, drawn(browser), 0, range(a.weights.shape[1]))
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="tutorial"]').click()
    Select(browser.find_element(By.ID, "t-query")).select_by_value("2")
    masked = browser.execute_script(
        "return [...document.querySelectorAll('#t-table tbody tr')].map(r => r.dataset.masked)")
    assert masked == ["0", "0", "0"] + ["1"] * (len(a.tokens) - 3)


@needs_minilm
def cli_path():
    if os.environ.get("QKV_CLI"):
        return pathlib.Path(os.environ["QKV_CLI"])
    return (pathlib.Path(__file__).resolve().parents[2] / os.environ.get("QKV_BUILD_DIR", "build")
            / "tools" / "qkv")


@needs_minilm
def test_live_page_of_qkv_serve_redraws_from_its_endpoint(browser):
    """`qkv serve`'s /explore: what the user types goes to /explore/attention,
    whose JSON is drawn; an error it returns is shown."""
    if not cli_path().is_file():
        pytest.skip(f"the qkv CLI is missing at {cli_path()}: build it or set QKV_CLI")
    server = subprocess.Popen([str(cli_path()), "serve", "--embed-model", str(MINILM), "--port",
                               "0", "--threads", "1"], stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stderr:
            found = re.search(r"listening on (http://[\d.]+:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "qkv serve did not start"
        threading.Thread(target=lambda: server.stderr.read(), daemon=True).start()
        browser.get(url + "/explore")
        assert browser.find_element(By.ID, "live").is_displayed()
        text = browser.find_element(By.ID, "live-text")
        text.clear()
        text.send_keys("Dogs bark.")
        browser.find_element(By.CSS_SELECTOR, "#live button[type=submit]").click()
        WebDriverWait(browser, 20).until(lambda d: d.execute_script(
            "return document.querySelectorAll('#head-svg text.query').length") == 5)
        a = qkv.explore(str(MINILM), "Dogs bark.")
        assert a.tokens == ["[CLS]", "dogs", "bark", ".", "[SEP]"]
        check_lines(a, drawn(browser), 0, range(a.weights.shape[1]))
        text.clear()
        text.send_keys("word " * 400)
        browser.find_element(By.CSS_SELECTOR, "#live button[type=submit]").click()
        error = browser.find_element(By.ID, "error")
        WebDriverWait(browser, 20).until(lambda d: error.text)
        assert "max_weights = 1000000" in error.text
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        # The 400 reply itself is logged as a failed resource; nothing else.
        assert all("400" in e["message"] for e in severe), severe
    finally:
        server.terminate()
        server.wait(timeout=30)
