"""The lake's one I/O edge: S3 (any S3-compatible server) or a local directory, through pyarrow.fs.

A root is ``s3://bucket[/prefix]`` or a directory (``file://`` optional). S3 credentials come from
the standard AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, ~/.aws, a web
identity token or instance role); the endpoint from ``--endpoint-url``, else AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL. Every object is written whole: a local file is renamed into place, an S3 object
appears only when its upload completes. A storage failure becomes one ``units.DataError`` line
naming the root and what went wrong (no bucket, access denied, endpoint unreachable).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import date
from typing import Any
from urllib.parse import urlsplit

from gpuwatch import units
from gpuwatch.lake import layout

DEFAULT_REGION = "us-east-1"  # what S3-compatible servers (MinIO, Ceph, moto) answer to
CONNECT_TIMEOUT_S = 10.0
ATTEMPTS = 3
MAX_DAY_LISTINGS = 31  # up to this many days, list each day's prefix; beyond, the cluster's whole prefix
_DENIED = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "EXPIRED_TOKEN",
           "INVALID_CLIENT_TOKEN_ID", "UNRECOGNIZED_CLIENT")


@dataclass(frozen=True)
class Lake:
    """An opened root: ``fs`` (a pyarrow FileSystem) and ``base``, the root's path inside it."""

    root: str
    fs: Any
    base: str
    endpoint: str | None = None


def open_lake(root: str, *, endpoint_url: str | None = None, env: Mapping[str, str] = os.environ) -> Lake:
    """The filesystem for ``root``; nothing is contacted yet (a missing bucket shows on first use)."""
    if root.startswith("s3://"):
        return _open_s3(root, endpoint_url=endpoint_url, env=env)
    if "://" in root and not root.startswith("file://"):
        raise units.UsageError(f"lake root {root!r}: expected s3://BUCKET[/PREFIX] or a directory")
    import pyarrow.fs as pafs

    path = os.path.abspath(root.removeprefix("file://"))
    return Lake(root, pafs.LocalFileSystem(), path.rstrip("/") or "/")


def _open_s3(root: str, *, endpoint_url: str | None, env: Mapping[str, str]) -> Lake:
    import pyarrow.fs as pafs

    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise units.UsageError(f"lake root {root!r}: {bucket!r} is not an S3 bucket name")
    endpoint = endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S,
                               "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS)}
    if endpoint:
        scheme, host = _endpoint(endpoint)
        options |= {"scheme": scheme, "endpoint_override": host}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or (DEFAULT_REGION if endpoint else None)
    if region is None:
        with errors(root):
            region = pafs.resolve_s3_region(bucket)
    base = "/".join(p for p in (bucket, prefix.strip("/")) if p)
    return Lake(root, pafs.S3FileSystem(region=region, **options), base, endpoint)


def _endpoint(url: str) -> tuple[str, str]:
    """``http://127.0.0.1:9000`` -> ("http", "127.0.0.1:9000")."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
        raise units.UsageError(f"--endpoint-url: {url!r} is not an endpoint URL (e.g. http://minio.storage:9000)")
    return parts.scheme, parts.netloc


@contextmanager
def errors(root: str, *, what: str = "") -> Iterator[None]:
    """Storage failures inside the block as one DataError naming ``root`` (and ``what``)."""
    try:
        yield
    except OSError as exc:
        raise units.DataError(describe(root, exc, what=what)) from None


def describe(root: str, exc: BaseException, *, what: str = "") -> str:
    """One line for a pyarrow storage error: the AWS error class where there is one."""
    text = " ".join(str(exc).split())
    where = f"{root}{': ' + what if what else ''}"
    code = re.search(r"AWS Error (\w+)", text)
    if code and code.group(1) == "NO_SUCH_BUCKET":
        return f"{where}: the bucket does not exist (create it first; gpuwatch never creates buckets)"
    if code and code.group(1) in _DENIED:
        return (f"{where}: access denied ({code.group(1)}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                f"(or the pod's role) and the bucket policy")
    if code and code.group(1) == "NETWORK_CONNECTION":
        return f"{where}: cannot reach the S3 endpoint ({text.split('Details: ')[-1][:200]})"
    return f"{where}: {text[:300]}"


def list_clusters(lake: Lake, table: str) -> list[str]:
    """The clusters with a partition of ``table`` (a missing table: none)."""
    import pyarrow.fs as pafs

    with errors(lake.root, what=f"listing {table}"):
        infos = lake.fs.get_file_info(pafs.FileSelector(layout.table_dir(lake.base, table), allow_not_found=True))
    return sorted(c for c in (layout.cluster_of(i.base_name) for i in infos if i.type == pafs.FileType.Directory) if c)


def list_parts(lake: Lake, table: str, cluster: str, days: list[date] | None = None) -> dict[date, list[tuple[str, int]]]:
    """Day -> (path, bytes) of its objects, for ``days`` (None: every day). A few days are listed
    partition by partition (only their prefixes); more, or all, in one recursive listing of the
    cluster's prefix (S3 pages 1,000 keys per request)."""
    if days is not None and len(days) <= MAX_DAY_LISTINGS:
        found = {day: _listing(lake, layout.partition_dir(lake.base, table, cluster, day), recursive=False)
                 for day in days}
        return {day: parts for day, parts in found.items() if parts}
    prefix = f"{layout.table_dir(lake.base, table)}/cluster={cluster}"
    out: dict[date, list[tuple[str, int]]] = {}
    wanted = None if days is None else set(days)
    for path, size in _listing(lake, prefix, recursive=True):
        key, _, value = path.rsplit("/", 2)[-2].partition("=")
        day = _day(value) if key == "date" else None
        if day is not None and (wanted is None or day in wanted):
            out.setdefault(day, []).append((path, size))
    return dict(sorted(out.items()))


def _day(text: str) -> date | None:
    """``2026-11-09`` as a date; None for anything else (``2026-13-45`` is no partition of this layout,
    and its objects are strangers, never read)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def _listing(lake: Lake, directory: str, *, recursive: bool) -> list[tuple[str, int]]:
    """(path, bytes) of this layout's objects under ``directory``, sorted (missing: none)."""
    import pyarrow.fs as pafs

    with errors(lake.root, what=f"listing {directory}"):
        infos = lake.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True, recursive=recursive))
    return sorted((i.path, i.size) for i in infos if i.type == pafs.FileType.File and layout.is_part(i.base_name))


def write_object(lake: Lake, path: str, data) -> None:
    """Write ``data`` (bytes or a pyarrow Buffer) at ``path`` whole: readers see the old object or
    the new one, never a part of it."""
    import pyarrow.fs as pafs

    with errors(lake.root, what=f"writing {path}"):
        if isinstance(lake.fs, pafs.LocalFileSystem):
            _write_local(lake.fs, path, data)
        else:  # S3: the object appears when the upload completes
            with lake.fs.open_output_stream(path) as out:
                out.write(data)


def _write_local(fs, path: str, data) -> None:
    directory, _, name = path.rpartition("/")
    fs.create_dir(directory, recursive=True)
    temporary = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open_output_stream(temporary) as out:
            out.write(data)
        fs.move(temporary, path)  # rename(2): atomic on one file system
    except BaseException:
        with suppress(FileNotFoundError):
            fs.delete_file(temporary)
        raise


def check_reachable(lake: Lake, *, create: bool = False) -> None:
    """Fail early, in one line, when the bucket is missing, access is denied or the endpoint is down
    (one LIST of the bucket), or when a local root is not a directory (``create``: make it)."""
    import pyarrow.fs as pafs

    with errors(lake.root):
        if not isinstance(lake.fs, pafs.LocalFileSystem):
            lake.fs.get_file_info(pafs.FileSelector(lake.base.split("/")[0], allow_not_found=False))
        elif create:
            lake.fs.create_dir(lake.base, recursive=True)
        elif lake.fs.get_file_info(lake.base).type != pafs.FileType.Directory:
            raise units.DataError(f"{lake.root}: no such directory")
