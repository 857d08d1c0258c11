def test_healthz_reports_database_broker_and_storage(s3):
    from django.test import Client
    body = Client().get("/healthz").json()
    assert body["status"] == "ok", body
    assert body["database"]["ok"] and body["broker"]["ok"] and body["storage"]["ok"]


def test_healthz_is_503_when_storage_is_down(s3):
    from django.test import Client, override_settings
    with override_settings(S3_ENDPOINT_URL="http://127.0.0.1:9"):
        resp = Client().get("/healthz")
    assert resp.status_code == 503 and not resp.json()["storage"]["ok"]
