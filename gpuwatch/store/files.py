"""The store as a file: who holds its lock, and removing one that a failed command created empty."""

from __future__ import annotations

import os
import re


def locked_by(message: str) -> str | None:
    """Who holds a store's lock, from DuckDB's lock error ("PID 4242: gpuwatch app --db x.duckdb"); None
    when ``message`` is not a lock conflict."""
    if "Could not set lock" not in message and "Conflicting lock" not in message:
        return None
    found = re.search(r"Conflicting lock is held in (.+?) \(PID (\d+)\)", message)
    if not found:
        return "another process"
    program, pid = found.groups()
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        words = []
    return f"PID {pid}: {_who(words) or program}"


def _who(words: list[str]) -> str:
    """A process' command line as a person would name it: ``gpuwatch app --db X`` for the app (Streamlit
    running gpuwatch's script, app_command.command), ``gpuwatch ...`` for the console script or ``-m gpuwatch``."""
    if any(w.endswith("streamlit_app.py") for w in words):
        db = words[words.index("--db") + 1] if "--db" in words[:-1] else None
        return "gpuwatch app" + (f" --db {db}" if db else "")
    named = next((i for i, w in enumerate(words) if os.path.basename(w) == "gpuwatch"), None)
    return " ".join(["gpuwatch", *words[named + 1:]] if named is not None else words)[:160]


def discard_if_empty(path: str | None, *, existed: bool) -> bool:
    """Remove the store at ``path`` when this command created it (``existed`` False) and no load reached
    it: a failed first ingest or a mistyped ``--db`` leaves no empty store behind. True when removed."""
    if existed or path is None or not os.path.isfile(path):
        return False
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:  # held by someone else, or not DuckDB: not ours to remove
        return False
    try:
        tables = {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        loaded = "ingest_log" in tables and con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] > 0
    finally:
        con.close()
    if loaded:  # a load committed: keep it
        return False
    for name in (str(path), f"{path}.wal"):
        if os.path.exists(name):
            os.remove(name)
    return True
