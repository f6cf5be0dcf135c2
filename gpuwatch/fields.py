"""Every DCGM field gpuwatch reads or serves, declared once; everything else derives from this table.

A row says what the field is (numeric DCGM id, dcgm-exporter's name, Prometheus TYPE and HELP as
dcgm-exporter <= 4.8 serves them, DCGM's value type), the unit it is served in, and where it lands
inside gpuwatch: the bundle column it feeds and the factor from its served unit to that column's
base unit. The exporter's DCGM series (exporter/metrics.py), the ids the dcgm source watches, the
nvml and simulate sources' value keys, and the Prometheus and ``.prom`` readers' name -> column
mapping and HELP unit check are all derived from here, so a field cannot drift between them.

Keyed by numeric id because DCGM 4.6 renamed its Python constants but kept the ids. Series order is
dcgm-exporter's etc/default-counters.csv order (it renders families in CSV order), plus SM_ACTIVE,
SM_OCCUPANCY and NVLINK_TX/RX, which gpuwatch enables. ``old_name`` is dcgm-exporter's
``--use-old-namespace`` (1.x) name where gpuwatch's readers accept it.
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

    @property
    def to_base(self) -> float:
        """Factor from the served unit to gpuwatch's base unit (ratio, bytes, watts, bytes/s)."""
        return _TO_BASE.get(self.unit, 1.0)

    @property
    def profiling(self) -> bool:
        """A DCP (DCGM_FI_PROF_*) field: off with --no-profiling."""
        return self.name.startswith("DCGM_FI_PROF_")


_TO_BASE = {"%": 0.01, "MiB": float(MIB)}
_PCIE = " over the PCIe bus - including both protocol headers and data payloads - in bytes per second."

FIELDS: tuple[Field, ...] = (
    Field(1, "DCGM_FI_DRIVER_VERSION"),  # a label on every series
    Field(50, "DCGM_FI_DEV_NAME"),  # on a MIG GPU instance: the profile name
    Field(100, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", unit="MHz"),
    Field(101, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", unit="MHz"),
    Field(140, "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", unit="C"),
    Field(150, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", unit="C"),
    Field(155, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "d", "W", "power_watts",
          old_name="dcgm_power_usage"),
    Field(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
          unit="mJ"),
    Field(202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    Field(203, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", unit="%", column="gpu_util",
          old_name="dcgm_gpu_utilization"),
    Field(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", unit="%"),
    Field(206, "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", unit="%"),
    Field(207, "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", unit="%"),
    Field(230, "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    Field(250, "DCGM_FI_DEV_FB_TOTAL", unit="MiB"),  # an input: the exporter serves bytes in its own gauge
    Field(251, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", unit="MiB",
          device_column=True, old_name="dcgm_fb_free"),
    Field(252, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", unit="MiB",
          column="fb_used_bytes", old_name="dcgm_fb_used"),
    Field(253, "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", unit="MiB",
          device_column=True),
    Field(449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes."),
    Field(526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    Field(393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    Field(394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    Field(395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    Field(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "d",
          "ratio", "gr_engine_active", old_name="dcgm_fi_prof_gr_engine_active"),
    Field(1002, "DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "d",
          "ratio", "sm_active", old_name="dcgm_fi_prof_sm_active"),
    Field(1003, "DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", "d",
          "ratio", "sm_occupancy", old_name="dcgm_fi_prof_sm_occupancy"),
    Field(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "d",
          "ratio", "tensor_active", old_name="dcgm_fi_prof_pipe_tensor_active"),
    Field(1005, "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
          "Ratio of cycles the device memory interface is active sending or receiving data.", "d", "ratio",
          "dram_active", old_name="dcgm_fi_prof_dram_active"),
    Field(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted" + _PCIE, unit="B/s"),
    Field(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received" + _PCIE, unit="B/s"),
    Field(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
          "The number of bytes of active NvLink tx (transmit) data including both header and payload.",
          unit="B/s", column="nvlink_tx_bytes_per_second", old_name="dcgm_fi_prof_nvlink_tx_bytes"),
    Field(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
          "The number of bytes of active NvLink rx (read) data including both header and payload.",
          unit="B/s", column="nvlink_rx_bytes_per_second", old_name="dcgm_fi_prof_nvlink_rx_bytes"),
)
BY_ID: dict[int, Field] = {f.id: f for f in FIELDS}
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
SERIES: tuple[Field, ...] = tuple(f for f in FIELDS if f.type is not None)


def fid(name: str) -> int:
    """The DCGM field id of ``name`` (a KeyError names an unknown field)."""
    return BY_NAME[name].id
