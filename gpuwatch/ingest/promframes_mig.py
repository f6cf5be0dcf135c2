"""A MIG GPU's device-wide fields in the samples frame: one shape whatever the exporter served.

dcgm-exporter (and gpuwatch's dcgm-exporter profiles) serve a MIG GPU's device-wide fields
(fields.DEVICE_WIDE: power, NVLink traffic, ...) on every GPU-instance series, each with the board's
value; gpuwatch's own profile serves them once, on a series with the GPU's labels and no GPU_I_ID
(exporter/compat.py). The store keeps the first shape: every instance row carries the board's value,
and analyses count it once per GPU (gpu_timeseries.sql takes the per-timestamp max). So at each
(ts, node, gpu_uuid) with instance rows, a GPU-level row (no GPU instance, no pod) holding device-wide
fields only lends them to the instance rows that lack them and is dropped (a GPU-level row with other
fields is a reading of the whole GPU, which dcgm-exporter's ``-d g+i`` serves: kept as it is). Pure pandas, no I/O.
"""

from __future__ import annotations

from gpuwatch import fields

# the samples columns of device-wide fields, and of the others
DEVICE_WIDE = tuple(f.column for f in fields.FIELDS if f.column and f.id in fields.DEVICE_WIDE)
OTHERS = tuple(f.column for f in fields.FIELDS if f.column and f.id not in fields.DEVICE_WIDE)
AT = ["ts", "node", "gpu_uuid"]


def spread(samples):
    """``samples`` with MIG GPUs' GPU-level rows folded into their instance rows (module docstring)."""
    instance = samples["mig_gi_id"].notna()
    # a GPU-level row with instance-level fields too is a whole-GPU reading (dcgm-exporter -d g+i): kept
    board = samples["mig_gi_id"].isna() & samples["pod"].isna() & samples[list(OTHERS)].isna().all(axis=1)
    if not instance.any() or not board.any():
        return samples
    present = samples.loc[instance, AT].drop_duplicates()
    lenders = samples.loc[board, AT + list(DEVICE_WIDE)].merge(present, on=AT)
    if lenders.empty:
        return samples
    lent = samples.loc[board, AT].merge(present, on=AT, how="left", indicator=True)["_merge"].eq("both").to_numpy()
    drop = samples.index[board.to_numpy()][lent]
    merged = samples.loc[instance, AT].merge(lenders, on=AT, how="left")
    out = samples.copy()
    for column in DEVICE_WIDE:
        borrowed = merged[column].to_numpy()
        out.loc[instance, column] = out.loc[instance, column].fillna(
            dict(zip(out.index[instance.to_numpy()], borrowed, strict=True)))
    return out.drop(index=drop)
