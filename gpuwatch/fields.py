"""Every DCGM field gpuwatch reads or serves, declared once; everything else derives from this table.

A row says what the field is (numeric DCGM id, dcgm-exporter's name, Prometheus TYPE and HELP as
dcgm-exporter <= 4.8 serves them, DCGM's value type), the unit it is served in, and where it lands
inside gpuwatch: the bundle column it feeds and the factor from its served unit to that column's
base unit. The exporter's DCGM series (exporter/metrics.py), the ids the dcgm source watches, the
nvml and simulate sources' value keys, and the Prometheus and ``.prom`` readers' name -> column
mapping and HELP unit check are all derived from here, so a field cannot drift between them.

Keyed by numeric id because DCGM 4.6 renamed its Python constants but kept the ids. Series order is
dcgm-exporter's etc/default-counters.csv order (it renders families in CSV order), plus SM_ACTIVE,
SM_OCCUPANCY and NVLINK_TX/RX, which gpuwatch enables.

A field is served under one name per dcgm-exporter generation (``NAMES``), each in the unit that
generation declares:

- ``1.x``: ``--use-old-namespace`` names (``old_name``), same units as 2.x-4.8;
- ``4.8``: dcgm-exporter 2.x through 4.5.3-4.8.2, ``name`` in ``unit`` (% , MiB, MHz, mJ);
- ``4.9``: dcgm-exporter 4.9 with DCGM 4.7, which serves DCGM's canonical names (``name49``) and, for
  eleven default fields, DCGM 4.7's base-unit variants under new ids (``unit49``: ratio, bytes, Hz,
  J, B/s). A field whose 4.9 name is its 4.8 name has ``name49`` None.

Readers convert from the unit of the generation a name belongs to, never from the values.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.units import MIB


@dataclass(frozen=True)
class Field:
    """One DCGM field. ``type`` None = read by sources but not served as a series (a label or an input)."""

    id: int
    name: str
    type: str | None = None
    help: str = ""
    fmt: str = "i"  # DCGM's value type as rendered: i = int64 (%d), d = double (%f)
    unit: str = ""  # the unit dcgm-exporter <= 4.8 serves; "%" and "MiB" convert to ratios and bytes
    column: str | None = None  # the samples column it feeds (bundle contract)
    device_column: bool = False  # describes the device (capacity) rather than a sample
    old_name: str | None = None
    name49: str | None = None  # dcgm-exporter 4.9's name, where it differs
    unit49: str | None = None  # dcgm-exporter 4.9's unit, where it differs
    cite: str = "csv"  # EVIDENCE key for the name, TYPE, HELP and unit served up to 4.8.4
    name49_cite: str | None = None  # EVIDENCE key for name49; None = not confirmed upstream
    unit49_cite: str | None = None  # EVIDENCE key for unit49; None = not confirmed upstream
    type49: str | None = None  # TYPE of a field 4.9 serves by default and earlier releases did not
    help49: str = ""  # its HELP (gpuwatch's)

    @property
    def to_base(self) -> float:
        """Factor from the served unit to gpuwatch's base unit (ratio, bytes, watts, bytes/s)."""
        return to_base(self.unit)

    @property
    def profiling(self) -> bool:
        """A DCP (DCGM_FI_PROF_*) field: off with --no-profiling."""
        return self.name.startswith("DCGM_FI_PROF_")


# Factor from a served unit to its base unit; units not listed are base units already (ratio, B, W,
# B/s, Hz, J, C) or unit-less counts.
_TO_BASE = {"%": 0.01, "MiB": float(MIB), "MHz": 1e6, "mJ": 1e-3, "MB/s": 1e6}


def to_base(unit: str) -> float:
    """Factor from ``unit`` to gpuwatch's base unit."""
    return _TO_BASE.get(unit, 1.0)

# Upstream evidence the field table cites, each read at the tag or commit named (nothing is quoted).
EVIDENCE: dict[str, str] = {
    "csv": "NVIDIA/dcgm-exporter etc/default-counters.csv at tags 4.5.3-4.8.2 (691c927) and 4.6.0-4.8.3: an "
           "active row (name, TYPE, HELP, the unit the HELP names)",
    "csv-commented": "NVIDIA/dcgm-exporter etc/default-counters.csv at 4.5.3-4.8.2: a commented-out row (name, TYPE, "
                     "HELP); gpuwatch enables it",
    "header": "NVIDIA/DCGM dcgmlib/dcgm_fields.h at v4.6.0: the field's name and description (bytes per "
              "second, total over links); TYPE and HELP wording are gpuwatch's",
    "label": "NVIDIA/dcgm-exporter etc/default-counters.csv at 4.5.3-4.8.2: a label row (not a series)",
    "input": "NVIDIA/DCGM dcgmlib/dcgm_fields.h at v4.6.0: read by gpuwatch, not served by default",
    "1.x": "NVIDIA/dcgm-exporter etc/1.x-compatibility-metrics.csv at 4.5.3-4.8.2 (--use-old-namespace)",
    "dcgm-4.6": "NVIDIA/DCGM dcgmlib/dcgm_fields.h at v4.6.0 names the field's id so, and dcgm-exporter 4.9.0's "
                "release notes rename the deprecated default fields to DCGM's new names",
    "dcgm-4.6.1": "NVIDIA/go-dcgm pkg/dcgm/dcgm_fields.h at v1.4611.0 (b7fa315, DCGM 4.6.1's header): the "
                  "base-unit field of that name and unit (ids 1603, 1604, 1611), for which the legacy id is "
                  "deprecated; dcgm-exporter 4.9.0 reads the base-unit fields (its release notes)",
    "notes-4.9.0": "dcgm-exporter 4.9.0 release notes (GitHub release 4.9.0): names the series or label, or the "
                   "unit change (clocks to Hz, energy to J, utilization to a 0-1 ratio, memory to bytes, NVLink "
                   "to B/s)",
}
UNVERIFIED = ("not confirmed upstream (no dcgm-exporter 4.9 counters file, DCGM 4.7 header or 4.9 capture was "
              "available; DCGM 4.6.1 has no such field): gpuwatch's guess")
HELP49 = "gpuwatch's (4.9.0's HELP texts were not available): the 4.8 text with the 4.9 unit"

_PCIE = " over the PCIe bus - including both protocol headers and data payloads - in bytes per second."

FIELDS: tuple[Field, ...] = (
    Field(1, "DCGM_FI_DRIVER_VERSION", name49="DCGM_FI_SYSTEM_DRIVER_VERSION", cite="label",
          name49_cite="notes-4.9.0"),  # a label on every series
    # an input, not served (not in dcgm-exporter's default set): NVML's CUDA version integer, 12040 = 12.4
    Field(5, "DCGM_FI_CUDA_DRIVER_VERSION", cite="input"),
    Field(50, "DCGM_FI_DEV_NAME", name49="DCGM_FI_DEV_GPU_NAME", cite="input", name49_cite="dcgm-4.6"),  # on a MIG GPU instance: the profile name
    Field(100, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", unit="MHz",
          name49="DCGM_FI_DEV_SM_CLOCK_HERTZ", unit49="Hz", name49_cite="dcgm-4.6.1", unit49_cite="dcgm-4.6.1"),
    Field(101, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", unit="MHz",
          name49="DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", unit49="Hz", name49_cite="dcgm-4.6.1",
          unit49_cite="dcgm-4.6.1"),
    # Inputs, not served by default (``type`` None; a counters file row serves them): dcgm-exporter's
    # etc/default-counters.csv (4.5.3-4.8.2) lists no clock-event bitmask at all and ships the ECC
    # totals commented out, so serving them would break the default set's compatibility.
    # NVML's clock event (throttle) reasons, bitmask of DCGM_CLOCKS_EVENT_REASON_* (the bits are NVML's);
    # DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is DCGM's older name for the same id.
    # DCGM < 4.6 named it DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (dcgm-exporter's counters files still do)
    Field(112, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", old_name="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", cite="input"),
    Field(140, "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", unit="C",
          name49="DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", name49_cite="dcgm-4.6"),
    Field(150, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", unit="C",
          name49="DCGM_FI_DEV_GPU_TEMP_CELSIUS", name49_cite="dcgm-4.6"),
    Field(155, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "d", "W", "power_watts",
          old_name="dcgm_power_usage", name49="DCGM_FI_DEV_BOARD_POWER_WATTS", name49_cite="dcgm-4.6"),
    Field(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
          unit="mJ", name49="DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", unit49="J", name49_cite="dcgm-4.6.1",
          unit49_cite="dcgm-4.6.1"),
    Field(202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
          name49="DCGM_FI_DEV_PCIE_REPLAY_TOTAL", name49_cite="dcgm-4.6"),
    Field(203, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", unit="%", column="gpu_util",
          old_name="dcgm_gpu_utilization", name49="DCGM_FI_DEV_GPU_UTIL_RATIO", unit49="ratio",
          name49_cite="dcgm-4.6"),  # unit: DCGM 4.6's header describes id 203 in %; 4.9.0's notes say ratio
    Field(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", unit="%",
          name49="DCGM_FI_DEV_MEMORY_UTIL_RATIO", unit49="ratio", unit49_cite="notes-4.9.0"),
    Field(206, "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", unit="%",
          name49="DCGM_FI_DEV_ENC_UTIL_RATIO", unit49="ratio", unit49_cite="notes-4.9.0"),
    Field(207, "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", unit="%",
          name49="DCGM_FI_DEV_DEC_UTIL_RATIO", unit49="ratio", unit49_cite="notes-4.9.0"),
    Field(230, "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
          name49="DCGM_FI_DEV_XID_ERROR", name49_cite="dcgm-4.6"),
    # an input up to 4.8 (the exporter serves bytes in its own gauge); 4.9.0 collects it by default
    Field(250, "DCGM_FI_DEV_FB_TOTAL", unit="MiB", device_column=True, name49="DCGM_FI_DEV_FB_CAPACITY_BYTES",
          unit49="B", cite="input", name49_cite="notes-4.9.0", unit49_cite="notes-4.9.0", type49="gauge",
          help49="Total framebuffer memory (in B)."),
    Field(251, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", unit="MiB",
          device_column=True, old_name="dcgm_fb_free", name49="DCGM_FI_DEV_FB_FREE_BYTES", unit49="B",
          unit49_cite="notes-4.9.0"),
    Field(252, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", unit="MiB",
          column="fb_used_bytes", old_name="dcgm_fb_used", name49="DCGM_FI_DEV_FB_USED_BYTES", unit49="B",
          unit49_cite="notes-4.9.0"),
    Field(253, "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", unit="MiB",
          device_column=True, name49="DCGM_FI_DEV_FB_RESERVED_BYTES", unit49="B", unit49_cite="notes-4.9.0"),
    # Double-bit (uncorrectable) ECC errors since driver load / over the GPU's life (inputs: ingest reads
    # health events from them where a counters file serves them; commented out in dcgm-exporter's default set)
    Field(311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", cite="input"),
    Field(313, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", cite="input"),
    Field(449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes.", unit="MB/s",
          name49="DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", unit49="B/s", unit49_cite="notes-4.9.0"),
    Field(526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    Field(393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors",
          name49="DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", name49_cite="dcgm-4.6"),
    Field(394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors",
          name49="DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", name49_cite="dcgm-4.6"),
    Field(395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
          name49="DCGM_FI_DEV_ROW_REMAP_FAILED", name49_cite="dcgm-4.6"),
    Field(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "d",
          "ratio", "gr_engine_active", old_name="dcgm_fi_prof_gr_engine_active",
          name49="DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", name49_cite="dcgm-4.6"),
    Field(1002, "DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "d",
          "ratio", "sm_active", old_name="dcgm_fi_prof_sm_active", name49="DCGM_FI_PROF_SM_UTIL_RATIO",
          cite="csv-commented", name49_cite="dcgm-4.6"),
    Field(1003, "DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", "d",
          "ratio", "sm_occupancy", old_name="dcgm_fi_prof_sm_occupancy",
          name49="DCGM_FI_PROF_SM_OCCUPANCY_RATIO", cite="csv-commented", name49_cite="dcgm-4.6"),
    Field(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "d",
          "ratio", "tensor_active", old_name="dcgm_fi_prof_pipe_tensor_active",
          name49="DCGM_FI_PROF_TENSOR_UTIL_RATIO", name49_cite="dcgm-4.6"),
    Field(1005, "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
          "Ratio of cycles the device memory interface is active sending or receiving data.", "d", "ratio",
          "dram_active", old_name="dcgm_fi_prof_dram_active", name49="DCGM_FI_PROF_DRAM_UTIL_RATIO",
          name49_cite="dcgm-4.6"),
    Field(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted" + _PCIE, unit="B/s"),
    Field(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received" + _PCIE, unit="B/s"),
    Field(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
          "The number of bytes of active NvLink tx (transmit) data including both header and payload.",
          unit="B/s", column="nvlink_tx_bytes_per_second", old_name="dcgm_fi_prof_nvlink_tx_bytes", cite="header"),
    Field(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
          "The number of bytes of active NvLink rx (read) data including both header and payload.",
          unit="B/s", column="nvlink_rx_bytes_per_second", old_name="dcgm_fi_prof_nvlink_rx_bytes", cite="header"),
)
BY_ID: dict[int, Field] = {f.id: f for f in FIELDS}
# Device-wide fields: DCGM reads them for the whole board (entity level DCGM_FE_GPU in
# dcgmlib/src/dcgm_fields.cpp, DCGM v4.6.0, the entityLevel argument of each field's declaration).
# On a MIG GPU dcgm-exporter serves them on every GPU-instance series, each with the board's value, so
# a sum over instances counts the board once per instance: sum them as ``sum(max by (UUID) (...))``.
# The rest are read per GPU instance or compute instance (FB_*, XID, the DCP ratios).
DEVICE_WIDE: frozenset[int] = frozenset({100, 101, 140, 150, 155, 156, 202, 203, 204, 206, 207, 393, 394, 395, 449,
                                         1009, 1010, 1011, 1012})
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
# The default served set: dcgm-exporter's default counters plus SM_ACTIVE, SM_OCCUPANCY, NVLINK_TX/RX.
# Rows with type None (driver/CUDA version, name, FB total, clock events, ECC totals) are read, not served.
SERIES: tuple[Field, ...] = tuple(f for f in FIELDS if f.type is not None)


GENERATIONS = ("1.x", "4.8", "4.9")


@dataclass(frozen=True)
class Name:
    """One name ``field`` is served under by dcgm-exporter ``generation``, in that generation's ``unit``."""

    name: str
    field: Field
    unit: str
    generation: str

    @property
    def to_base(self) -> float:
        return to_base(self.unit)

    @property
    def type(self) -> str | None:
        """Prometheus type: 4.9's NVLink throughput is a rate (gauge) where 4.8 typed it counter; a field
        only 4.9 serves has its ``type49``."""
        if self.field.type is None:
            return self.field.type49 if self.generation == "4.9" else None
        return "gauge" if self.unit == "B/s" and self.field.type == "counter" else self.field.type

    @property
    def name_cite(self) -> str:
        """The upstream evidence for this name (EVIDENCE text), or UNVERIFIED."""
        if self.generation == "4.9" and self.name == self.field.name49:
            return EVIDENCE[self.field.name49_cite] if self.field.name49_cite else UNVERIFIED
        if self.generation == "1.x" and self.field.cite != "input":  # in the 1.x file only where 4.8 has a row
            return EVIDENCE["1.x"] if self.field.cite in ("csv", "csv-commented") else UNVERIFIED
        return EVIDENCE[self.field.cite]

    @property
    def unit_cite(self) -> str:
        """The upstream evidence for this name's unit, or UNVERIFIED."""
        if self.generation == "4.9" and self.field.unit49:
            return EVIDENCE[self.field.unit49_cite] if self.field.unit49_cite else UNVERIFIED
        return self.name_cite if self.generation == "4.9" else EVIDENCE[self.field.cite]

    @property
    def help_cite(self) -> str:
        """Where this name's HELP text comes from."""
        return HELP49 if self.generation == "4.9" and self.name == self.field.name49 else EVIDENCE[self.field.cite]

    @property
    def verified(self) -> bool:
        """Name and unit both confirmed upstream."""
        return UNVERIFIED not in (self.name_cite, self.unit_cite)

    @property
    def help(self) -> str:
        """The HELP text, naming this generation's unit where the field's text names one."""
        if self.field.type is None and self.generation == "4.9":
            return self.field.help49
        text = self.field.help
        if self.unit != self.field.unit and self.field.unit and f"(in {self.field.unit})" in text:
            return text.replace(f"(in {self.field.unit})", f"(in {self.unit})")
        if self.unit != self.field.unit:
            return f"{text.rstrip('.')} (in {self.unit})."
        return text


def _names() -> dict[str, Name]:
    out: dict[str, Name] = {}
    for f in FIELDS:
        out[f.name] = Name(f.name, f, f.unit, "4.8")
        if f.old_name:
            out[f.old_name] = Name(f.old_name, f, f.unit, "1.x")
        if f.name49:
            out[f.name49] = Name(f.name49, f, f.unit49 or f.unit, "4.9")
    return out


NAMES: dict[str, Name] = _names()


def name_of(field: Field, generation: str) -> Name | None:
    """The name (and unit) ``generation`` serves ``field`` under; None where it does not serve it
    (4.9 serves a field it did not rename under its 4.8 name)."""
    pick = {"1.x": field.old_name, "4.8": field.name, "4.9": field.name49 or field.name}[generation]
    return NAMES[pick] if pick else None


def series(generation: str) -> tuple[Field, ...]:
    """The fields ``generation`` serves by default, in order: SERIES, and from 4.9 on the fields it
    added to its default set (``type49``: FB capacity in bytes)."""
    return tuple(f for f in FIELDS if f.type is not None or (generation == "4.9" and f.type49 is not None))


def served(generation: str) -> dict[str, Name]:
    """The series names ``generation`` serves, each with its unit."""
    return {n.name: n for f in series(generation) if (n := name_of(f, generation)) is not None}


def unverified(generation: str) -> list[Name]:
    """The names ``generation`` serves whose name or unit no upstream source confirms."""
    return [n for n in served(generation).values() if not n.verified]


def evidence_table() -> str:
    """The README's field table: every name each generation serves (or the ingest reads), its unit and
    the upstream evidence for its name, unit and HELP (a test keeps the README in step)."""
    rows = ["| DCGM id | name | generation | TYPE | unit | evidence: name | evidence: unit | HELP from |",
            "|---|---|---|---|---|---|---|---|"]
    cites = {text: f"[{key}]" for key, text in EVIDENCE.items()} | {UNVERIFIED: "**unverified**", HELP49: "gpuwatch"}
    for f in FIELDS:
        for n in sorted((n for n in NAMES.values() if n.field is f), key=lambda n: GENERATIONS.index(n.generation)):
            rows.append(f"| {f.id} | `{n.name}` | {n.generation} | {n.type or 'label/input'} | {n.unit or '-'} | "
                        f"{cites[n.name_cite]} | {cites[n.unit_cite]} | {cites[n.help_cite]} |")
    keys = [f"[{key}]: {text}." for key, text in EVIDENCE.items()]
    return "\n".join(rows) + "\n\n" + "\n".join(f"- {k}" for k in keys) + f"\n- **unverified**: {UNVERIFIED}.\n"


def fid(name: str) -> int:
    """The DCGM field id of ``name`` (a KeyError names an unknown field)."""
    return BY_NAME[name].id
