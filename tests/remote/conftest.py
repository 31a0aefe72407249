"""The tests of data in a bucket use ``s3_server`` and ``s3`` of tests/conftest.py."""
