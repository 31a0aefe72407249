"""Files named by URL: ``s3://``, ``gs://``, ``az://`` / ``abfs://``, ``http(s)://`` (read only),
``memory://``, ``file://`` and chained URLs (``simplecache::s3://...``), through fsspec.

A name is a URL when it has a scheme (``proto://``), or ends in one after a chain
(``simplecache::s3://...``); every other name is a local path, as before. The protocol packages
are extras (s3fs, gcsfs, adlfs): a missing one is named with the extra that installs it.
Credentials come by fsspec's usual means (environment, config files) or as ``storage_options``;
they are never shown: :func:`shown` is what a message, a log line or ``info`` says of a URL (no
user or password, no query string, which is where a presigned URL's signature lives).

Every request against an object store has a deadline: :data:`S3_DEFAULTS` bounds each
connection and each read, and the retries, unless the caller's ``storage_options`` say
otherwise.
"""

import contextlib
import contextvars
import os
import re
from pathlib import Path

from streamrank.errors import InputError, ParameterError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# protocol -> (package, extra that installs it)
PACKAGES = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
            "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure"),
            "http": ("aiohttp", "http"), "https": ("aiohttp", "http")}
# botocore: 5 s to connect, 8 s for any one read to answer, 2 attempts; s3fs makes 1 (its
# ``retries``: attempts, 5 by default, each with botocore's). A stalled server so fails a request
# after 2 x 8 s = 16 s, and a command within a minute, where s3fs's defaults had not given up
# after 590 s
S3_DEFAULTS = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 8,
                                 "retries": {"max_attempts": 2, "mode": "standard"}}}
S3_RETRIES = 1

_OPTIONS = contextvars.ContextVar("streamrank_storage_options", default=None)


def is_url(name):
    """Whether ``name`` (str or path-like) is a URL rather than a local path."""
    if name is None or isinstance(name, Path):
        return False
    s = os.fspath(name) if isinstance(name, os.PathLike) else name
    # a chain's last link names where the bytes live (simplecache::s3://...): a local name with
    # "::" in it and no scheme stays a path
    return isinstance(s, str) and _SCHEME.match(s.split("::")[-1]) is not None


def location(name):
    """``name`` as the writers and readers take it: the URL string itself, or a local Path."""
    return str(name) if is_url(name) else Path(name)


def protocol(url):
    """The outermost protocol of ``url`` (the last link of a chain: where the bytes live)."""
    last = url.split("::")[-1]
    m = _SCHEME.match(last)
    return m.group(1).lower() if m else "file"


def shown(url):
    """``url`` as messages say it: without a user, a password or a query string (a local path as
    it is)."""
    s = str(url)
    if not is_url(s):
        return s
    out = []
    for link in s.split("::"):
        m = _SCHEME.match(link)
        if m:
            rest = link[m.end():]
            host, sep, tail = rest.partition("/")
            host = host.rsplit("@", 1)[-1]
            link = f"{m.group(0)}{host}{sep}{tail}"
        out.append(link.split("?", 1)[0] + ("?..." if "?" in link else ""))
    return "::".join(out)


_URL_IN_TEXT = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*::)*[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"]+")


def redact_urls(text):
    """``text`` with every URL in it as :func:`shown` says it (the CLI's messages and log lines)."""
    return _URL_IN_TEXT.sub(lambda m: shown(m.group(0)), text)


def parse_option(text):
    """``KEY=VALUE`` of ``--storage-option`` as {key: value}: ``a.b=v`` nests ({"a": {"b": v}}); the
    value is JSON where it reads as JSON (``true``, ``3``, ``{"k": 1}``), else the text."""
    import json
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ParameterError(f"storage_option must be KEY=VALUE; got {text!r}. Use storage_option=anon=true")
    try:
        v = json.loads(value)
    except ValueError:
        v = value
    out = v
    for part in reversed(key.strip().split(".")):
        out = {part: out}
    return out


def merged(options, more):
    """``options`` with ``more`` merged in (nested dicts key by key)."""
    out = dict(options)
    for k, v in more.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@contextlib.contextmanager
def storage_options(options):
    """Within the block, URLs are opened with ``options`` (fsspec's ``storage_options``: keys and
    values the protocol's file system takes); None leaves the ones in force."""
    if options is None:
        yield
        return
    token = _OPTIONS.set(dict(options))
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current_options():
    """The storage options in force (:func:`storage_options`), a copy; {} when none."""
    return dict(_OPTIONS.get() or {})


def filesystem(url, options=None):
    """(fsspec file system, path within it) of ``url``, with ``options`` or the ones in force.
    A missing protocol package is a ParameterError naming the extra that installs it."""
    import fsspec
    opts = current_options() if options is None else dict(options)
    proto = protocol(url)
    retries = opts.pop("retries", S3_RETRIES)
    if proto in ("s3", "s3a"):
        opts = {**S3_DEFAULTS, **opts, "config_kwargs": {**S3_DEFAULTS["config_kwargs"],
                                                         **opts.get("config_kwargs", {})}}
    try:
        fs, path = fsspec.core.url_to_fs(url, **opts)
    except ImportError:
        pkg, extra = PACKAGES.get(proto, (f"fsspec's {proto} support", proto))
        raise ParameterError(f"{shown(url)}: reading {proto}:// needs {pkg}: pip install 'streamrank[{extra}]'") \
            from None
    except ValueError as e:
        if "Protocol not known" in str(e):
            raise ParameterError(f"{shown(url)}: fsspec knows no protocol {proto!r}; give a local path or an "
                                 f"s3://, gs://, az://, http(s)://, memory:// or file:// URL") from None
        raise
    if proto in ("s3", "s3a"):
        fs.retries = retries  # s3fs's own retries: an attribute, not an argument
    return fs, path


def store_errors():
    """The exception types a store's file system raises for what the store did or would not do
    (refused, unreachable, timed out, bad credentials): OSError and TimeoutError, and botocore's
    and aiohttp's own where those are installed."""
    types = [OSError, TimeoutError]
    for mod, names in (("botocore.exceptions", ("BotoCoreError", "ClientError")), ("aiohttp", ("ClientError",))):
        try:
            m = __import__(mod, fromlist=list(names))
        except ImportError:
            continue
        types += [getattr(m, n) for n in names if hasattr(m, n)]
    return tuple(types)


def store_error(url, e, what="cannot be read"):
    """StoreError naming ``url`` (shown) and the store's error ``e`` (its URLs shown too)."""
    from streamrank.errors import StoreError
    return StoreError(f"{shown(url)}: {what} ({type(e).__name__}: {redact_urls(str(e))[:200]})")


def _ask(url, call):
    """``call(fs, path)`` on the object at ``url``: InputError when there is none, StoreError when
    the store does not answer."""
    fs, path = filesystem(url)
    try:
        return call(fs, path)
    except FileNotFoundError:
        raise InputError(f"{shown(url)}: no such object") from None
    except store_errors() as e:
        raise store_error(url, e) from None


# fsspec's glob characters, as the shell's: a name holding one (and naming no file itself) is a pattern
_GLOB = re.compile(r"[*?\[]")


def expand(names):
    """``names`` with every glob pattern (``*``, ``?``, ``[...]``; ``**`` crosses folders) replaced
    by the files or objects it matches, in lexicographic order: fsspec's ``glob`` for a URL (a
    chain's last link is globbed, the chain kept), Python's ``glob`` for a local path. A pattern
    that matches nothing is an InputError naming it; a local file whose name holds such a
    character is itself."""
    import glob
    out = []
    for name in names:
        s = str(name) if is_url(name) else os.fspath(name)
        if not _GLOB.search(s.split("::")[-1]) or (not is_url(name) and os.path.exists(s)):
            out.append(name)
            continue
        if is_url(s):
            chain, _, last = s.rpartition("::")
            found = _ask(last, lambda fs, path: [fs.unstrip_protocol(p) for p in sorted(fs.glob(path))
                                                  if not fs.isdir(p)])
            found = [f"{chain}::{u}" if chain else u for u in found]
        else:
            found = [Path(p) for p in sorted(glob.glob(s, recursive=True)) if os.path.isfile(p)]
        if not found:
            raise InputError(f"{shown(s)}: the pattern matches no file; check it, or quote it so that the shell "
                             f"does not expand it first")
        out += found
    return out


def _info(url):
    """The store's facts about the object at ``url`` (fsspec's ``info``)."""
    return _ask(url, lambda fs, path: fs.info(path))


def size_of(url):
    """Bytes of the object at ``url``, or InputError when there is none (or it is a prefix)."""
    info = _info(url)
    if info.get("type") == "directory":
        raise InputError(f"{shown(url)} is a prefix (a directory); give the object's full name")
    return int(info["size"])


def object_stamp(url):
    """{"path", "size", "etag"} of the object at ``url``: what changes when it is written again
    (the ETag, or the version id, or the modification time where a store gives neither)."""
    info = _info(url)
    tag = info.get("ETag") or info.get("VersionId") or info.get("etag") or info.get("md5Hash") or \
        str(info.get("LastModified") or info.get("mtime") or info.get("last_modified") or "")
    return {"path": url, "size": int(info.get("size") or 0), "etag": str(tag)}


def read_bytes(path):
    """The whole content of a small file (a list of ids, of names): a local path or a URL."""
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    return _ask(str(path), lambda fs, inner: fs.cat_file(inner))


class Url:
    """A URL where a dataset, a model or a score file lives: ``str()`` is the URL itself (to open
    it again, in this process or a worker), ``name`` its last part, ``shown`` what messages say."""

    def __init__(self, url):
        self.url = str(url)
        self.name = self.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        self.shown = shown(self.url)

    def __str__(self):
        return self.url

    def __repr__(self):
        return f"Url({self.shown!r})"

    def __eq__(self, other):
        return isinstance(other, Url) and other.url == self.url

    def __hash__(self):
        return hash(self.url)
