"""Authentication: bearer tokens, hashed storage, revocation, last-used time, the command."""
from django.core.management import call_command

from webapp.accounts.models import ApiToken, digest


def test_no_token_is_401_json(api, s3):
    from tests.service.conftest import ApiClient
    resp = ApiClient(None).get("/api/v1/models")
    assert resp.status_code == 401
    assert "Bearer" in resp.json()["error"]


def test_wrong_scheme_and_unknown_token_are_401(user):
    from tests.service.conftest import ApiClient
    anon = ApiClient(None)
    anon.headers = {"Authorization": "Basic abc"}
    assert anon.get("/api/v1/models").status_code == 401
    assert ApiClient("tf_not-a-real-token").get("/api/v1/models").status_code == 401


def test_token_is_stored_hashed_and_records_last_use(api, token):
    stored = ApiToken.objects.get()
    assert stored.digest == digest(token) and token not in (stored.digest, stored.prefix)
    assert stored.last_used_at is None
    assert api.get("/api/v1/models").status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None


def test_revoked_token_is_401(api):
    ApiToken.objects.get().revoke()
    resp = api.get("/api/v1/models")
    assert resp.status_code == 401
    assert "revoked" in resp.json()["error"]


def test_create_api_token_command_creates_user_and_prints_token(capsys):
    call_command("create_api_token", "ci-bot")
    raw = capsys.readouterr().out.strip()
    assert raw.startswith("tf_")
    assert ApiToken.authenticate(raw).username == "ci-bot"
    call_command("create_api_token", "ci-bot")  # again: same user, a second token
    assert ApiToken.objects.filter(user__username="ci-bot").count() == 2
