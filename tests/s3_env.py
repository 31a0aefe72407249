"""The environment that points s3fs (and child processes) at the test S3 server."""

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def s3_environment(endpoint, monkeypatch):
    """Set the endpoint and dummy credentials for this test; return a fresh s3fs file system."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
