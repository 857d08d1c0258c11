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
