"""Attribution: which pods' containers hold each device (whole GPU or MIG instance) on a node.

Pure: joins the devices a source reports with the allocations kubelet reports. Every sharing pod
and every time-slicing replica keeps its own entry (``by_device``), and allocations whose device id
matches no device are returned, not dropped, so the exporter can count and log them. dcgm-exporter's
own rule (one pod per device: it fills a device -> pod map in the kubelet's List order, so the last
entry wins) is kept beside it as ``last``, for the compatibility profiles that label series that way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuwatch.model import Allocation, Device


@dataclass(frozen=True)
class Attribution:
    """``by_device``: every device key -> its allocations (``[]`` = unallocated), sorted;
    ``unknown``: allocations whose device id names no device given, in kubelet's order;
    ``last``: every allocated device key -> the allocation the kubelet listed last for it."""

    by_device: dict[str, list[Allocation]]
    unknown: list[Allocation]
    last: dict[str, Allocation] = field(default_factory=dict)

    @property
    def unknown_ids(self) -> list[str]:
        return sorted({a.device_id for a in self.unknown})


def attribute(devices: Sequence[Device], allocations: Sequence[Allocation]) -> dict[str, list[Allocation]]:
    """``Device.key`` -> allocations on that device (see :func:`attribute_with_unknown`)."""
    return attribute_with_unknown(devices, allocations).by_device


def attribute_with_unknown(devices: Sequence[Device], allocations: Sequence[Allocation]) -> Attribution:
    """Map each allocation to the device its id names, keeping every sharer; report the rest.

    GPU UUIDs map to the whole GPU, ``MIG-…`` UUIDs to the instance with that ``mig_uuid``,
    legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` ids to the instance with that parent and GI id, index
    ids (``"0"``, device plugin ``deviceIDStrategy=index``) and GKE's ``nvidia0`` /
    ``nvidia0/gi3`` to the GPU (instance) with that index. Exact duplicates collapse to one.
    """
    aliases = device_aliases(devices)
    by_device: dict[str, list[Allocation]] = {d.key: [] for d in devices}
    unknown: list[Allocation] = []
    last: dict[str, Allocation] = {}
    for allocation in dict.fromkeys(allocations):  # ordered de-duplication
        key = resolve(allocation.device_id, aliases)
        if key is None:
            unknown.append(allocation)
        else:
            by_device[key].append(allocation)
            last[key] = allocation
    return Attribution({key: sorted(found, key=_order) for key, found in by_device.items()}, unknown, last)


def device_aliases(devices: Iterable[Device]) -> dict[str, str]:
    """Every id kubelet may use for a device (lower-cased) -> ``Device.key``.

    Index ids are only unambiguous on one node: an index seen on two nodes gets no alias.
    """
    devices = list(devices)
    aliases: dict[str, str] = {}
    by_index: dict[str, set[str]] = {}
    for d in devices:
        if d.is_mig:
            names = [d.mig_uuid or "", f"MIG-{d.gpu_uuid}/{d.mig_gi_id}"]
            indexed = [f"nvidia{d.gpu_index}/gi{d.mig_gi_id}"]
        else:
            names, indexed = [d.gpu_uuid], [str(d.gpu_index), f"nvidia{d.gpu_index}"]
        aliases.update((name.lower(), d.key) for name in names if name)
        for name in indexed:
            by_index.setdefault(name, set()).add(d.key)
    aliases.update((name, next(iter(keys))) for name, keys in by_index.items() if len(keys) == 1)
    return aliases


def resolve(device_id: str, aliases: dict[str, str]) -> str | None:
    """The ``Device.key`` a kubelet device id (replica suffix already removed) names, or None."""
    found = aliases.get(device_id.lower())
    if found is None and device_id.upper().startswith("MIG-GPU-"):
        found = aliases.get("/".join(device_id.split("/")[:2]).lower())  # drop the CI part
    return found


def _order(a: Allocation) -> tuple:
    vgpu = a.vgpu or ""
    return (a.namespace, a.pod, a.container, a.resource, a.device_id, len(vgpu), vgpu)
