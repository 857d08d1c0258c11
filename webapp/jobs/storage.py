"""Object storage through boto3's S3 API (SeaweedFS locally, MinIO or AWS S3 elsewhere).

Keys are built only from database ids and fixed file names, never from user strings.
Uploads carry a SHA-256 checksum the server verifies; transient errors are retried with
exponential backoff a bounded number of times, then surface as StorageError.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import logging
import time
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

log = logging.getLogger(__name__)


class StorageError(RuntimeError):
    """Storage unreachable or refusing requests after retries; the message says which."""


def model_key(model) -> str:
    return f"models/{model.id}/model.onnx"


def artifact_key(job, name: str) -> str:
    return f"jobs/{job.id}/{name}"


def _client(endpoint: str):
    config = Config(connect_timeout=settings.S3_CONNECT_TIMEOUT, read_timeout=60,
                    retries={"max_attempts": 1, "mode": "standard"},
                    signature_version="s3v4", s3={"addressing_style": "path"})
    return boto3.client("s3", endpoint_url=endpoint or None, region_name=settings.S3_REGION,
                        aws_access_key_id=settings.S3_ACCESS_KEY_ID,
                        aws_secret_access_key=settings.S3_SECRET_ACCESS_KEY, config=config)


@functools.lru_cache(maxsize=4)
def _cached_client(endpoint: str, key_id: str):
    return _client(endpoint)


def client():
    return _cached_client(settings.S3_ENDPOINT_URL, settings.S3_ACCESS_KEY_ID)


def public_client():
    endpoint = settings.S3_PUBLIC_ENDPOINT_URL or settings.S3_ENDPOINT_URL
    return _cached_client(endpoint, settings.S3_ACCESS_KEY_ID)


def _is_transient(exc: Exception) -> bool:
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return status >= 500 or status in (408, 429)
    return isinstance(exc, BotoCoreError)


def with_retries(action: str, fn):
    """Run fn(); retry transient storage errors with exponential backoff."""
    attempts = max(settings.S3_RETRIES, 1)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (BotoCoreError, ClientError) as exc:
            if not _is_transient(exc) or attempt == attempts:
                raise StorageError(f"object storage at {settings.S3_ENDPOINT_URL} failed to "
                                   f"{action} after {attempt} attempt(s): {exc}") from exc
            delay = settings.S3_RETRY_BACKOFF * 2 ** (attempt - 1)
            log.warning("storage %s failed (%s); retry %d in %.1fs", action, exc, attempt, delay)
            time.sleep(delay)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def put_file(key: str, path: Path, sha256_hex: str, content_type: str) -> None:
    checksum = base64.b64encode(bytes.fromhex(sha256_hex)).decode()

    def upload():
        with open(path, "rb") as body:
            client().put_object(Bucket=settings.S3_BUCKET, Key=key, Body=body,
                                ContentType=content_type, ChecksumSHA256=checksum,
                                Metadata={"sha256": sha256_hex})
    with_retries(f"upload {key}", upload)


def download_file(key: str, path: Path) -> None:
    with_retries(f"download {key}",
                 lambda: client().download_file(settings.S3_BUCKET, key, str(path)))


def delete_prefix(prefix: str) -> None:
    def delete():
        listing = client().list_objects_v2(Bucket=settings.S3_BUCKET, Prefix=prefix)
        for obj in listing.get("Contents", []):
            client().delete_object(Bucket=settings.S3_BUCKET, Key=obj["Key"])
    with_retries(f"delete {prefix}", delete)


def presigned_url(key: str, filename: str) -> str:
    """A GET URL that expires after S3_PRESIGN_SECONDS and downloads as `filename`."""
    return public_client().generate_presigned_url(
        "get_object", ExpiresIn=settings.S3_PRESIGN_SECONDS,
        Params={"Bucket": settings.S3_BUCKET, "Key": key,
                "ResponseContentDisposition": f'attachment; filename="{filename}"'})


def ensure_bucket() -> None:
    def create():
        try:
            client().head_bucket(Bucket=settings.S3_BUCKET)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                raise
            _create_bucket()
    with_retries(f"create bucket {settings.S3_BUCKET}", create)


def _create_bucket() -> None:
    """Create the bucket; one that is already ours is no error. SeaweedFS on a loaded host
    answered HeadBucket 404 and then CreateBucket BucketAlreadyOwnedByYou (another process
    had just made it), and every service test of that CI run failed at its setup."""
    try:
        client().create_bucket(Bucket=settings.S3_BUCKET)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise


def health() -> tuple[bool, str]:
    try:
        client().head_bucket(Bucket=settings.S3_BUCKET)
        return True, f"bucket {settings.S3_BUCKET} reachable"
    except (BotoCoreError, ClientError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
