"""Failure modes of Jobs (gpuwatch.fleet.failures plants them with the others).

* **mig_mismatch**: Jobs on the smallest free MIG instances whose memory grows to at least 95% of the
  instance and crash (Error, exit 1: CUDA out of memory), restarted after CrashLoopBackOff, 3-5 times,
  until the Job gives up; a decoy crash-loops OOMKilled (exit 137: host memory) at half the instance.
* **gang_stall**: a four-pod job whose two scheduled pods hold their GPUs idle while the other two
  stay Pending (no room) for 3-6 h, until the job's deadline; a decoy job whose last pod is scheduled
  minutes after its siblings; and a straggler: one GPU of a running 2-pod x 2-GPU job whose SM
  activity stays far below its peers' for hours.
"""

from __future__ import annotations

import math

from gpuwatch.fleet import lifecycle
from gpuwatch.fleet.catalog import TEAMS
from gpuwatch.fleet.planting import HOUR, Planter

MINUTE = 60.0


def mig_mismatch(plant: Planter) -> None:
    """Three Jobs too big for their MIG instance, and the host-memory decoy."""
    instances = plant.mig()
    for cause in ("gpu_memory", "gpu_memory", "gpu_memory", "host_memory"):
        gpu = cause == "gpu_memory"
        lengths = [plant.uniform(10 * MINUTE, 25 * MINUTE) for _ in range(int(plant.rng.integers(3, 6)) if gpu else 3)]
        need = sum(lengths) + sum(lifecycle.backoff(k) for k in range(1, len(lengths)))
        span = _smallest(plant, instances, need)
        if span is None:
            continue
        device, lo, hi = span
        runs, t = [], plant.start_in((lo, hi), need)
        for crash, length in enumerate(lengths, start=1):
            runs.append((t, t + length))
            t += length + lifecycle.backoff(crash)
        pod = plant.pod([device], runs[0][0], runs[-1][1], stem="finetune", behavior="productive")
        share = 0.99 if gpu else float(plant.rng.uniform(0.45, 0.6))
        for i, (a, b) in enumerate(runs):
            plant.occupy(device, (a, b), pod=pod, kind="ramp" if gpu else "training", behavior="productive",
                         fb_frac=share)
            if i + 1 < len(runs):  # CrashLoopBackOff: the pod keeps its instance, its process is gone
                plant.occupy(device, (b, runs[i + 1][0]), pod=pod, kind="idle", behavior="productive",
                             fb_bytes=plant.empty_bytes(device))
        job = plant.get(pod).owner_name
        plant.status += lifecycle.crash_loop(plant.get(pod), runs, observed_from=plant.base.start, job=job,
                                             reason="Error" if gpu else "OOMKilled", exit_code=1 if gpu else 137)
        plant.fail("mig_mismatch", cause, device=device, pod=pod, job=job)


def _smallest(plant: Planter, instances: list[int], need: float) -> tuple[int, float, float] | None:
    """A free span at least ``need`` long on the smallest MIG instances that have one."""
    for size in sorted({plant.devices[i].mig_placement_size for i in instances}):
        span = plant.pick(plant.free.find([i for i in instances if plant.devices[i].mig_placement_size == size], need))
        if span is not None:
            return span
    return None


def gang_stall(plant: Planter) -> None:
    """A stalled gang, its decoy, and a straggler, each on GPUs of one node free long enough."""
    _stall(plant)
    _decoy(plant)
    _straggler(plant)


def _block(plant: Planter, n: int, need: float) -> tuple[list[int], float, float] | None:
    """``n`` whole GPUs of one node free from one instant for at least ``need``: (gpus, t0, until)."""
    by_node: dict[str, list[int]] = {}
    for d in plant.whole():
        by_node.setdefault(plant.devices[d].node, []).append(d)
    options = []
    for gpus in by_node.values():
        starts = sorted({math.ceil(lo) for d in gpus for lo, _ in plant.free.spans.get(d, ())})
        for t0 in starts:
            ends = sorted(((end, g) for g in gpus if (end := plant.free.end_at(g, t0)) is not None),
                          key=lambda e: (-e[0], e[1]))
            if len(ends) >= n and ends[n - 1][0] - t0 >= need:
                options.append(([g for _, g in ends[:n]], float(t0), float(math.floor(ends[n - 1][0]))))
    return plant.pick(options)


def _gang(plant: Planter) -> tuple[str, str]:
    """A team and a Volcano-style job name (the pods' gang key)."""
    team = plant.team()
    return team, f"{team}-ddp-{plant.next_index()}"


def _stall(plant: Planter) -> None:
    per_pod, block = 2, _block(plant, 4, 2 * HOUR)
    if block is None:
        per_pod, block = 1, _block(plant, 2, 2 * HOUR)
    if block is None:
        return
    gpus, t0, until = block
    end, (team, job) = t0 + min(plant.uniform(3 * HOUR, 6 * HOUR), until - t0), _gang(plant)
    created = t0 - 30.0
    for i in range(4):
        name = f"{job}-worker-{i}"
        if i >= 2:  # no room for them: Pending until the job's deadline deletes the gang
            plant.status += lifecycle.never_scheduled(TEAMS[team][0], name, since=created, until=end, job=job,
                                                      gpu_request=float(per_pod))
            continue
        held = gpus[i * per_pod:(i + 1) * per_pod]
        pod = plant.pod(held, t0, end, stem="ddp", behavior="hoarder", team=team, owner=job, name=name)
        memory = float(plant.rng.uniform(0.02, 0.05))  # CUDA context and NCCL buffers, waiting for peers
        for d in held:
            plant.occupy(d, (t0, end), pod=pod, kind="idle", behavior="hoarder", fb_frac=memory, multi_gpu=per_pod > 1)
        plant.status += lifecycle.failed(plant.get(pod), observed_from=plant.base.start, job=job, exit_code=143,
                                         created=created)
    plant.fail("gang_stall", "siblings_pending", job=job, namespace=TEAMS[team][0])


def _decoy(plant: Planter) -> None:
    block = _block(plant, 3, 2 * HOUR)
    if block is None:
        return
    gpus, t0, until = block
    end, (team, job) = t0 + min(plant.uniform(2 * HOUR, 5 * HOUR), until - t0), _gang(plant)
    late = t0 + plant.uniform(2 * MINUTE, 8 * MINUTE)  # the last sibling finds room within minutes
    for i, d in enumerate(gpus):
        start = late if i == 2 else t0
        pod = plant.pod([d], start, end, stem="ddp", behavior="productive", team=team, owner=job,
                        name=f"{job}-worker-{i}")
        if start < late:
            plant.occupy(d, (t0, late), pod=pod, kind="idle", behavior="productive", fb_frac=0.03, multi_gpu=True)
        plant.occupy(d, (late, end), pod=pod, kind="training", behavior="productive",
                     fb_frac=float(plant.rng.uniform(0.5, 0.8)), multi_gpu=True)
        plant.status += lifecycle.completed(plant.get(pod), observed_from=plant.base.start, job=job, created=t0 - 30.0)
    plant.fail("gang_stall", "siblings_started", job=job, namespace=TEAMS[team][0])


def _straggler(plant: Planter) -> None:
    block = _block(plant, 4, 3 * HOUR)
    if block is None:
        return
    gpus, t0, until = block
    end, (team, job) = t0 + min(plant.uniform(3 * HOUR, 8 * HOUR), until - t0), _gang(plant)
    slow = gpus[int(plant.rng.integers(len(gpus)))]
    for i in range(2):
        held = gpus[2 * i:2 * i + 2]
        pod = plant.pod(held, t0, end, stem="ddp", behavior="productive", team=team, owner=job,
                        name=f"{job}-worker-{i}")
        memory = float(plant.rng.uniform(0.5, 0.8))
        for d in held:
            plant.occupy(d, (t0, end), pod=pod, kind="lagging" if d == slow else "training", behavior="productive",
                         fb_frac=memory, multi_gpu=True)
        plant.status += lifecycle.completed(plant.get(pod), observed_from=plant.base.start, job=job, created=t0 - 30.0)
        if slow in held:
            plant.fail("gang_stall", "straggler", device=slow, pod=pod, job=job)
