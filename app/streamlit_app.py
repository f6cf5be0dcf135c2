"""gpuwatch's Streamlit app: entry script. Start it with ``gpuwatch app --db FILE``.

Opens the store read-only, draws the global filters in the sidebar and routes to one page per
file in ``app/views/`` with ``st.navigation`` (Streamlit's ``pages/`` directory is legacy).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # views import ``ui`` from here

import ui

VIEWS = Path(__file__).resolve().parent / "views"
PAGES = (
    ("fleet.py", "Fleet", ":material/dashboard:"),
    ("idle_hoarding.py", "Idle hoarding", ":material/hourglass_empty:"),
    ("false_utilization.py", "False utilization", ":material/speed:"),
    ("mig.py", "MIG", ":material/grid_view:"),
    ("chargeback.py", "Chargeback", ":material/payments:"),
    ("recommendations.py", "Recommendations", ":material/savings:"),
    ("health.py", "Health & fit", ":material/health_and_safety:"),
    ("topology.py", "Topology", ":material/hub:"),
    ("gpu.py", "GPU drill-down", ":material/memory:"),
    ("reclaim_audit.py", "Reclaim audit", ":material/history:"),
    ("readiness.py", "Readiness", ":material/fact_check:"),
)
FLEET_WIDE = ("fleet.py", "mig.py", "gpu.py", "readiness.py")  # whole-fleet pages: not part of a team view


def main() -> None:
    st.set_page_config(page_title="gpuwatch", page_icon=":material/memory:", layout="wide")
    allowed = ui.scope(headers=st.context.headers)
    shown = [p for p in PAGES if allowed is None or p[0] not in FLEET_WIDE]
    pages = [st.Page(VIEWS / file, title=title, icon=icon, default=i == 0) for i, (file, title, icon) in enumerate(shown)]
    page = st.navigation(pages)
    st.sidebar.title("gpuwatch")
    if allowed == ():  # a team view, and this request names no team: show nothing rather than everything
        st.error("This is a team view and your request names no team (ask your administrator for a team group).")
        st.stop()
    path = ui.db_path()
    opened = ui.open_db(path)
    if opened is None:
        st.stop()
    mtime, coverage = opened
    st.session_state["gw_context"] = ui.sidebar(path, mtime, coverage, allowed)
    page.run()


main()
