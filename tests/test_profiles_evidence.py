"""Compatibility profiles keyed by the dcgm-exporter releases they reproduce, and the upstream evidence
behind every name, unit and HELP they serve (gpuwatch/fields.py EVIDENCE, README "Compatibility
profiles").

- The node label follows from the releases: ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from
  4.6.0-4.8.3 on (dcgm-exporter #655 shipped in 4.6.0-4.8.3 per its release notes), so a user of
  4.8.3/4.8.4 has a profile; no profile straddles the rename; the old name ``dcgm-exporter-4.8`` still
  resolves.
- Every served name cites its evidence; the dcgm-exporter 4.8.x profiles serve only confirmed names;
  what 4.9 serves unconfirmed is listed as UNVERIFIED in ``gpuwatch export --help`` and marked in the
  README's field table (generated from the same table, tests/test_readme.py).
- 4.9 serves DCGM_FI_DEV_FB_CAPACITY_BYTES (its notes: collected by default) in bytes, and the ingest
  reads it as the device's capacity.
"""

from __future__ import annotations

import argparse
import re

import pytest

from gpuwatch import fields
from gpuwatch.exporter import command, compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.ingest import promfile
from gpuwatch.sources.simulate import SimulatedSource
from tests.conftest import ROOT

T = DEFAULT_START + 2.5 * 86400 + 1234.0


@pytest.mark.parametrize(("profile", "label"), [("dcgm-exporter-4.8.2", "Hostname"), ("dcgm-exporter-4.8.4", "hostname"),
                                                ("dcgm-exporter-4.9", "hostname"), ("gpuwatch", "hostname")])
def test_the_node_label_follows_from_the_releases(profile, label):
    assert compat.PROFILES[profile].hostname_label == label == compat.options(profile).hostname_label


def test_a_user_of_every_release_since_4_2_3_has_a_profile_and_none_straddles_the_rename():
    boundary = compat.exporter_version(compat.HOSTNAME_RENAMED_IN)
    covered = []
    for name, p in compat.PROFILES.items():
        if p.releases is None:
            continue
        first, last = (compat.exporter_version(t) for t in p.releases)
        assert first <= last and (last < boundary or first >= boundary), name
        assert p.covers in compat.describe(name)
        covered.append((first, last))
    for release in ("4.5.3-4.8.2", "4.6.0-4.8.3", "4.6.1-4.8.4", "4.7.0-4.9.0"):
        v = compat.exporter_version(release)
        assert any(first <= v <= last for first, last in covered), release
    assert compat.resolve("dcgm-exporter-4.8") == "dcgm-exporter-4.8.2" == compat.DEFAULT
    assert compat.options("dcgm-exporter-4.8") == compat.options("dcgm-exporter-4.8.2")
    with pytest.raises(ValueError, match=r"dcgm-exporter-4\.8\.4"):
        compat.options("dcgm-exporter-4.7")


@pytest.mark.parametrize("profile", list(compat.PROFILES))
def test_every_served_name_cites_its_evidence(profile):
    naming = compat.PROFILES[profile].naming
    for name in fields.served(naming).values():
        for cite in (name.name_cite, name.unit_cite, name.help_cite):
            assert cite in (*fields.EVIDENCE.values(), fields.UNVERIFIED, fields.HELP49), (name.name, cite)
    if naming == "4.8":
        assert fields.unverified(naming) == [], "a 4.8.x profile serves only names upstream confirms"


def _help() -> str:
    parser = argparse.ArgumentParser(formatter_class=lambda prog: argparse.HelpFormatter(prog, width=10_000))
    command.add_arguments(parser)
    return parser.format_help()


def test_unverified_names_are_marked_in_help_and_readme():
    guessed = [n.name for n in fields.unverified("4.9")]
    assert "DCGM_FI_DEV_FB_USED_BYTES" in guessed and "DCGM_FI_DEV_GPU_UTIL_RATIO" in guessed
    assert "DCGM_FI_DEV_BOARD_POWER_WATTS" not in guessed  # DCGM 4.6's own name for id 155
    assert "DCGM_FI_DEV_SM_CLOCK_HERTZ" not in guessed  # DCGM 4.6.1's base-unit field 1603
    line = re.search(r"dcgm-exporter-4\.9: .*?; gpuwatch:", _help(), re.S)[0]
    assert all(name in line for name in guessed) and "UNVERIFIED" in line
    readme = (ROOT / "README.md").read_text()
    for name in guessed:
        row = next(r for r in readme.splitlines() if r.startswith("| ") and f"`{name}`" in r)
        assert "**unverified**" in row, name


def test_4_9_serves_fb_capacity_in_bytes_and_ingest_reads_it():
    fleet = build_fleet(gpus=40, seed=0)
    text = render_at(fleet, T, node="gpu-node-004", options=compat.options("dcgm-exporter-4.9"))
    assert "# TYPE DCGM_FI_DEV_FB_CAPACITY_BYTES gauge" in text
    served = {re.search(r'UUID="([^"]+)"', line)[1]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_CAPACITY_BYTES{")}
    readings = {r.device.gpu_uuid: r.values[250] for r in SimulatedSource(fleet, node="gpu-node-004").read(T).readings}
    assert served == {uuid: mib * 2**20 for uuid, mib in readings.items()}
    only = "\n".join(x for x in text.splitlines() if "FB_CAPACITY" in x or "GPU_TEMP_CELSIUS" in x) + "\n"
    devices = promfile.parse(only, at=T, source="4.9")["devices"].set_index("gpu_uuid")
    assert devices["fb_total_bytes"].to_dict() == served
    for profile in ("dcgm-exporter-4.8.2", "dcgm-exporter-4.8.4", "gpuwatch"):
        assert "FB_CAPACITY" not in render_at(fleet, T, node="gpu-node-004", options=compat.options(profile))
