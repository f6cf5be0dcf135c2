"""Five failure modes planted in a synthetic fleet, each with its ground truth (``Fleet.failures``,
written as failures.csv) and decoys an analysis must not report.

* **driver_drift**: in one GPU model's pool, some whole-GPU nodes run an older driver
  (catalog.DRIFT_DRIVER); Jobs started there fail within minutes (CreateContainerError, or exit 1
  and CrashLoopBackOff), while the pool's other nodes start pods fine but for one ordinary failure.
* **gang_stall**, **mig_mismatch**: failures_jobs.
* **unhealthy_gpu**: Jobs on whole GPUs die with a hardware health event (XID 79 and lost; XID 48
  and an ECC double-bit error; XID 94/63 and a row-remap failure); a decoy dies with an application
  XID (13 or 43).
* **orphaned_memory**: whole GPUs and MIG instances keep 2-20 GiB for 35 min-3 h after their pod
  ended, with no pod; once the kubelet keeps listing the ended pod (its samples go on past its
  end_ts); decoys hold less than an empty device's baseline, or hold memory for minutes only.

Everything lands on time the fleet left unallocated (planting.Planter), so the fleet's own pods,
segments and truth stay as they were; a mode that finds no room in a small fleet is skipped.
"""

from __future__ import annotations

from gpuwatch.fleet import lifecycle
from gpuwatch.fleet.catalog import DRIFT_DRIVER, Fleet
from gpuwatch.fleet.failures_jobs import gang_stall, mig_mismatch
from gpuwatch.fleet.planting import HOUR, Planter
from gpuwatch.units import GIB, MIB

MINUTE = 60.0
# Health events of a GPU that failed (kind, code) -> the cause failures.csv names.
HARDWARE = ((("xid", 79), ("lost", None)), (("xid", 48), ("ecc_dbe", 1)),
            (("xid", 94), ("xid", 63), ("row_remap_failure", None)))
APPLICATION = ((("xid", 13),), (("xid", 43),))


def inject(fleet: Fleet) -> Fleet:
    """``fleet`` with the five failure modes planted, deterministically from its seed."""
    plant = Planter(fleet)
    driver_drift(plant)
    gang_stall(plant)
    mig_mismatch(plant)
    unhealthy_gpu(plant)
    orphaned_memory(plant)
    return plant.fleet()


def driver_drift(plant: Planter) -> None:
    """Some nodes of one model's pool on DRIFT_DRIVER, with 4-6 failed starts each."""
    special = {d.node for i, d in enumerate(plant.devices) if d.is_mig or i in plant.shared}
    whole_nodes = {plant.devices[d].node for d in plant.whole()} - special
    pools: dict[str, set[str]] = {}
    for d in plant.devices:
        pools.setdefault(d.gpu_model, set()).add(d.node)
    models = sorted(m for m, nodes in pools.items() if len(nodes) >= 2 and nodes & whole_nodes)
    model = plant.pick(models)
    if model is None:
        return
    eligible = sorted(pools[model] & whole_nodes)
    bad = sorted(plant.rng.choice(eligible, size=max(1, len(eligible) // 3), replace=False).tolist())
    for node in bad:
        plant.set_driver(node, DRIFT_DRIVER)
        gpus = [d for d in plant.whole() if plant.devices[d].node == node]
        failed = sum(_failed_start(plant, gpus, create_error=plant.rng.random() < 0.5)
                     for _ in range(int(plant.rng.integers(4, 7))))
        if failed >= 3:  # fewer (no room in a small fleet) are too few to blame a driver for
            plant.fail("driver_drift", DRIFT_DRIVER[0], node=node)
    plant.excluded |= set(bad)
    good = [d for d in plant.whole() if plant.devices[d].gpu_model == model]
    _failed_start(plant, good, create_error=False)  # the ordinary failure a healthy version has too


def _failed_start(plant: Planter, gpus: list[int], *, create_error: bool) -> bool:
    """A Job's pod that never gets going on one of ``gpus``: its container cannot be created, or it
    exits 1 within a minute, three times, and the Job gives up."""
    span = plant.pick(plant.free.find(gpus, 15 * MINUTE))
    if span is None:
        return False
    device, lo, hi = span
    start = plant.start_in((lo, hi), 15 * MINUTE)
    runs, t = [], start
    for crash in range(1, 4):
        runs.append((t, t + plant.uniform(15, 45)))
        t = runs[-1][1] + lifecycle.backoff(crash)
    end = start + plant.uniform(2 * MINUTE, 10 * MINUTE) if create_error else runs[-1][1]
    pod = plant.pod([device], start, end, stem="finetune", behavior="productive")
    plant.occupy(device, (start, end), pod=pod, kind="idle", behavior="productive", fb_bytes=plant.empty_bytes(device))
    kw = {"observed_from": plant.base.start, "job": plant.get(pod).owner_name}
    plant.status += (lifecycle.create_error(plant.get(pod), **kw) if create_error else
                     lifecycle.crash_loop(plant.get(pod), runs, reason="Error", exit_code=1, **kw))
    return True


def unhealthy_gpu(plant: Planter) -> None:
    """Three Jobs killed by a hardware fault of their GPU, and one by its own bug (the decoy)."""
    cases = [(events, "hardware") for events in HARDWARE]
    cases.append((plant.pick(list(APPLICATION)), "application"))
    for events, cause in cases:
        run = plant.uniform(HOUR, 4 * HOUR)
        span = plant.pick(plant.free.find(plant.whole(), run + 10 * MINUTE))
        if span is None:
            continue
        device, lo, hi = span
        start = plant.start_in((lo, hi), run)
        pod = plant.pod([device], start, start + run, stem="train", behavior="productive")
        plant.occupy(device, (start, start + run), pod=pod, kind="training", behavior="productive",
                     fb_frac=float(plant.rng.uniform(0.4, 0.8)))
        for i, (kind, code) in enumerate(events):
            plant.event(device, ts=start + run - 10 + i, kind=kind, code=code)
        job = plant.get(pod).owner_name
        plant.status += lifecycle.failed(plant.get(pod), observed_from=plant.base.start, job=job)
        plant.fail("unhealthy_gpu", cause, device=device, pod=pod, job=job)


def orphaned_memory(plant: Planter) -> None:
    """Memory held with no pod right after a pod ended, a pod the kubelet keeps listing, and decoys."""
    whole, mig = plant.whole(), plant.mig()
    small = [d for d in mig if plant.empty_bytes(d) < 20 * MIB]  # whose own baseline is under the decoy's
    for cause, devices in (("leaked", whole), ("leaked", whole), ("leaked", mig), ("below_baseline", whole),
                           ("below_baseline", small), ("too_short", whole)):
        need = {"leaked": (35 * MINUTE, 3 * HOUR), "below_baseline": (HOUR, 3 * HOUR),
                "too_short": (5 * MINUTE, 10 * MINUTE)}[cause]
        held = plant.uniform(*need)
        span = plant.pick(plant.free.find(devices, held, after_pod=True))
        if span is None:
            continue
        device, lo, _ = span
        plant.occupy(device, (lo, lo + held), pod=None, kind="idle", behavior="unallocated",
                     fb_bytes=_orphan_bytes(plant, device, cause=cause))
        plant.fail("orphaned_memory", cause, device=device)
    _ghost(plant, whole)
    _leaked_processes(plant, whole)


def _orphan_bytes(plant: Planter, device: int, *, cause: str) -> float:
    """2-20 GiB (at most 80% of the device) for an orphan; under the analysis' baselines for a decoy:
    55-59 MiB on a whole GPU (what an empty MIG-mode GPU holds), 20-26 MiB on a MIG instance."""
    if cause == "below_baseline":
        lo, hi = (20, 26) if plant.devices[device].is_mig else (55, 59)
        return plant.uniform(lo, hi) * MIB
    top = min(20 * GIB, 0.8 * plant.devices[device].fb_total_bytes)
    return plant.uniform(2 * GIB / MIB, top / MIB) * MIB


def _ghost(plant: Planter, whole: list[int]) -> None:
    """A Job that completes, then 40-90 min in which the kubelet still lists it: its samples go on,
    labelled with it, holding 2-20 GiB, past its end_ts."""
    run, ghost = plant.uniform(HOUR, 3 * HOUR), plant.uniform(40 * MINUTE, 90 * MINUTE)
    span = plant.pick(plant.free.find(whole, run + ghost))
    if span is None:
        return
    device, lo, hi = span
    start = plant.start_in((lo, hi), run + ghost)
    pod = plant.pod([device], start, start + run, stem="train", behavior="productive")
    plant.occupy(device, (start, start + run), pod=pod, kind="training", behavior="productive",
                 fb_frac=float(plant.rng.uniform(0.3, 0.6)))
    plant.occupy(device, (start + run, start + run + ghost), pod=pod, kind="idle", behavior="productive",
                 fb_bytes=_orphan_bytes(plant, device, cause="ghost_pod"))
    job = plant.get(pod).owner_name
    plant.status += lifecycle.completed(plant.get(pod), observed_from=plant.base.start, job=job)
    plant.fail("orphaned_memory", "ghost_pod", device=device, pod=pod, job=job)


def _leaked_processes(plant: Planter, whole: list[int]) -> None:
    """Orphaned memory on GPUs that are allocated again (the exporter's processes with --proc-root): a
    Job's process keeps 2-20 GiB for 40-90 min after its pod ended while the next Job runs on the GPU
    (process_of_ended_pod), and a process in no pod's cgroup holds memory for 30-60 min (host_process);
    decoys: a process whose cgroup could not be read (never judged) and a host process for 8 minutes."""
    for cause in ("process_of_ended_pod", "host_process", "unknown_owner", "host_process_short"):
        first, second = plant.uniform(HOUR, 2 * HOUR), plant.uniform(2 * HOUR, 3 * HOUR)
        span = plant.pick(plant.free.find(whole, first + second))
        if span is None:
            continue
        device, lo, hi = span
        start = plant.start_in((lo, hi), first + second)
        ended = plant.pod([device], start, start + first, stem="train", behavior="productive")
        after = plant.pod([device], start + first, start + first + second, stem="train", behavior="productive")
        for pod, (a, b) in ((ended, (start, start + first)), (after, (start + first, start + first + second))):
            plant.occupy(device, (a, b), pod=pod, kind="training", behavior="productive",
                         fb_frac=float(plant.rng.uniform(0.2, 0.4)))
            plant.status += lifecycle.completed(plant.get(pod), observed_from=plant.base.start,
                                                job=plant.get(pod).owner_name)
            plant.process(device, (a, b), pid=int(plant.rng.integers(2_000, 4_000_000)),
                          fb_bytes=0.2 * plant.devices[device].fb_total_bytes, pod_uid=plant.get(pod).pod_uid, in_pod=1)
        held = {"process_of_ended_pod": (40 * MINUTE, 90 * MINUTE), "host_process": (30 * MINUTE, HOUR),
                "unknown_owner": (HOUR, HOUR), "host_process_short": (8 * MINUTE, 8 * MINUTE)}[cause]
        leak = (start + first, start + first + plant.uniform(*held))
        owner = {"process_of_ended_pod": (plant.get(ended).pod_uid, 1), "unknown_owner": (None, None)}.get(cause, (None, 0))
        plant.process(device, leak, pid=int(plant.rng.integers(2_000, 4_000_000)),
                      fb_bytes=_orphan_bytes(plant, device, cause="leaked"), pod_uid=owner[0], in_pod=owner[1])
        plant.fail("orphaned_memory", cause, device=device, pod=ended if cause == "process_of_ended_pod" else None,
                   job=plant.get(ended).owner_name if cause == "process_of_ended_pod" else None)
