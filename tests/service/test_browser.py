"""A person in headless Chromium: sign in, upload, compile, watch the job finish, download.

Uses Debian's /usr/bin/chromium (`make test` installs it with apt-get when missing).
"""
import hashlib
import shutil
from pathlib import Path

import pytest

from tests.service import onnx_models

CHROMIUM = "/usr/bin/chromium"
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM),
                                reason="Chromium is missing: apt-get install chromium")


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
        yield context.new_page()
        context.close()
        browser.close()


@pytest.fixture
def dana(make_user):
    # created before Playwright starts: its event loop forbids ORM calls in this thread
    return make_user("dana", "a-long-enough-password")


def test_sign_in_upload_compile_watch_and_download(live_server, worker, dana, page, tmp_path):
    model_file = tmp_path / "tiny-net.onnx"
    model_file.write_bytes(onnx_models.elementwise())

    page.goto(f"{live_server}/")
    page.fill("#id_username", "dana")
    page.fill("#id_password", "a-long-enough-password")
    page.click("button[type=submit]")
    page.wait_for_url("**/models/")
    assert page.is_visible("text=No models yet")

    page.set_input_files("#model-file", str(model_file))
    page.wait_for_url("**/models/*-*/", timeout=30_000)
    assert page.is_visible("text=tiny-net")
    page.fill("#dim__x__0", "4")
    page.click("#compile-form button[type=submit]")
    page.wait_for_url("**/jobs/*-*/")

    page.wait_for_selector("#job-state:text('succeeded')", timeout=180_000)
    page.wait_for_selector("#latency-chart")
    assert "×" in page.inner_text("#speedup")
    assert page.is_visible("#layer-report .layer-row")
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "job-page.png"), full_page=True)

    row = page.locator(".download-row[data-name='package.tar.gz']")
    expected_sha = row.locator(".sha").inner_text().split()[-1]
    with page.expect_download() as info:
        row.locator("a", has_text="Download").click()
    saved = tmp_path / "package.tar.gz"
    info.value.save_as(saved)
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == expected_sha


LIGHT_MODELS = Path(__import__("onnx").__file__).parent / "backend" / "test" / "data" / "light"


def _report_model(name: str) -> Path:
    if name == "squeezenet":  # SqueezeNet 1.0 from onnx's test data; weights built by its graph
        return LIGHT_MODELS / "light_squeezenet.onnx"
    from tests.models.catalog import model_path
    return model_path(name)


@pytest.mark.slow
@pytest.mark.parametrize("name,top_op", [("wavernn", "GRU"), ("squeezenet", "Conv")])
def test_layer_report_of_a_real_job(live_server, worker, dana, page, tmp_path, name, top_op):
    """A sampling net and a CNN through the service; the job page's layer report is saved as
    test-output/layer-report-NAME.png (run under /work/bin/cpu-exclusive for real figures)."""
    model_file = tmp_path / f"{name}.onnx"
    model_file.write_bytes(_report_model(name).read_bytes())
    page.goto(f"{live_server}/")
    page.fill("#id_username", "dana")
    page.fill("#id_password", "a-long-enough-password")
    page.click("button[type=submit]")
    page.wait_for_url("**/models/")
    page.set_input_files("#model-file", str(model_file))
    page.wait_for_url("**/models/*-*/", timeout=60_000)
    page.click("#compile-form button[type=submit]")
    page.wait_for_url("**/jobs/*-*/")
    page.wait_for_selector("#job-state:text('succeeded')", timeout=600_000)
    rows = page.locator("#layer-report .layer-row")
    assert rows.count() >= 3 and rows.first.get_attribute("data-op") == top_op
    OUTPUT.mkdir(exist_ok=True)
    page.locator("#layer-report").screenshot(path=str(OUTPUT / f"layer-report-{name}.png"))
    page.screenshot(path=str(OUTPUT / f"job-page-{name}.png"), full_page=True)
