"""Recommendations from the failure-mode findings (pure; same rules as gpuwatch/recommendations.py).

Kinds, each from one finding (docs/architecture.md#finding-semantics):

- ``fix_mig_profile`` (mig_mismatch, cause gpu_memory): move the pod to the smallest profile that
  fits its peak; the waste is the GPU time its failed runs burnt. OOMKilled pods (host memory) get
  ``investigate_host_memory`` instead: a bigger GPU would not help.
- ``gang_schedule`` (gang_stall, partial_allocation): the idle GPUs a job held while its siblings were
  Pending; ``investigate_straggler`` (gang_stall, straggler) is at stake only.
- ``reset_gpu`` (orphaned_memory): the device's cost while no pod could use it.
- ``pin_driver`` (driver_drift, blamed versions): the GPU-hours the failing pods held.
- ``cordon_gpu`` (unhealthy_gpu, hardware): the allocated cost on a failing GPU — at stake, not a
  saving (the pods still need GPUs); ``investigate_xid`` for application-class XIDs, at stake too.

Savings are run-rates of the waste observed in the window (``RunRate``); at-stake kinds count 0.
"""

from __future__ import annotations

from gpuwatch import units
from gpuwatch.recommendations import RunRate, number, present, records, row, who

# Kinds a person must look at first: their waste is at stake, not a claimed saving.
NOT_COUNTED = ("investigate_host_memory", "investigate_straggler", "cordon_gpu", "investigate_xid")


def rows(*, rate: RunRate, mig_mismatch=None, gang_stall=None, orphaned_memory=None, driver_drift=None,
         unhealthy_gpu=None) -> list[dict]:
    """Every failure-mode recommendation (any frame may be None or empty)."""
    return (_mig_mismatch(mig_mismatch, rate) + _gang_stall(gang_stall, rate) + _orphaned(orphaned_memory, rate)
            + _drift(driver_drift, rate) + _unhealthy(unhealthy_gpu, rate))


def _mig_mismatch(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame):
        waste = number(r.get("usd_burnt"))
        peak = number(r.get("peak_fb_used_bytes")) / units.GIB
        limit = number(r.get("fb_total_bytes")) / units.GIB
        evidence = (f"{number(r.get('failed_runs')):.0f} failed runs, memory peaked at {peak:.1f} of {limit:.1f} GiB "
                    f"on {r.get('mig_profile') or 'a whole GPU'}; {number(r.get('gpu_hours_burnt')):.1f} GPU-hours burnt")
        if r.get("cause") == "host_memory":
            out.append(row("investigate_host_memory", r, evidence=evidence + "; OOMKilled (host memory limit)",
                           waste=rate.monthly(waste), share=0.0, not_counted=NOT_COUNTED,
                           basis=rate.basis("failed runs' cost", waste) + "; at stake, not counted as savings",
                           action=f"Raise the container memory limit of {who(r)}: it is OOMKilled (host memory), "
                                  "not out of GPU memory"))
            continue
        target = r.get("recommended_profile")
        out.append(row("fix_mig_profile", r, evidence=evidence, waste=rate.monthly(waste), share=1.0,
                       not_counted=NOT_COUNTED, basis=rate.basis("failed runs' cost", waste),
                       action=f"Move {who(r)} to {target}: its runs fail at the memory limit of "
                              f"{r.get('mig_profile') or 'its GPU'}", target=target))
    return out


def _gang_stall(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame):
        waste = number(r.get("usd_held_idle"))
        job = {**r, "pod": r.get("pod") if present(r.get("pod")) else r.get("job")}
        if r.get("kind") == "straggler":
            out.append(row("investigate_straggler", job, evidence=(
                f"SM activity {number(r.get('sm_active')):.0%} vs the job's median "
                f"{number(r.get('job_median_sm_active')):.0%} for {number(r.get('seconds')) / 3600:.1f} h"),
                waste=rate.monthly(waste), share=0.0, not_counted=NOT_COUNTED,
                basis=rate.basis("the job's idle-wait cost", waste) + "; at stake, not counted as savings",
                action=f"Check GPU {r.get('gpu_uuid')} on {r.get('node')}: it lags the rest of job {r.get('job')}",
                subject=f"{r.get('job')}|{r.get('gpu_uuid')}"))
            continue
        evidence = (f"{number(r.get('pods_holding')):.0f} pods held {number(r.get('gpus_held')):g} GPUs idle for "
                    f"{number(r.get('seconds')) / 3600:.1f} h while {number(r.get('pods_pending')):.0f} sibling pods "
                    f"({number(r.get('gpus_pending')):g} GPUs) were Pending")
        out.append(row("gang_schedule", job, evidence=evidence, waste=rate.monthly(waste), share=1.0,
                       not_counted=NOT_COUNTED, basis=rate.basis("idle GPUs held while waiting", waste),
                       action=f"Schedule job {r.get('namespace')}/{r.get('job')} as a gang (Volcano, Kueue, KAI) "
                              "so it holds no GPUs until all its pods fit", subject=str(r.get("job"))))
    return out


def _orphaned(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame):
        waste = number(r.get("usd_unusable"))
        device = r["gpu_uuid"] + (f"/{int(number(r['mig_gi_id']))}" if present(r.get("mig_gi_id")) else "")
        last = f"; last held by {r.get('last_namespace')}/{r.get('last_pod')}" if present(r.get("last_pod")) else ""
        evidence = (f"{number(r.get('max_fb_used_bytes')) / units.GIB:.1f} GiB held with no pod for "
                    f"{number(r.get('seconds')) / 3600:.1f} h{last}")
        out.append(row("reset_gpu", {**r, "namespace": None, "pod": None, "team": None}, evidence=evidence,
                       waste=rate.monthly(waste), share=1.0, not_counted=NOT_COUNTED,
                       basis=rate.basis("cost of the device while unusable", waste),
                       action=f"Drain {r.get('node')} and reset GPU {device}: memory is held by no pod",
                       subject=f"{device}|{r.get('since')}", usd_per_hour=number(r.get("usd_per_hour"))))
    return out


def _drift(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame, "blamed"):
        waste = number(r.get("usd_lost"))
        evidence = (f"{number(r.get('failed_starts')):.0f} of {number(r.get('pods_started')):.0f} pods failed to start "
                    f"on driver {r.get('driver_version')} ({number(r.get('failure_rate')):.0%} vs "
                    f"{number(r.get('others_failure_rate')):.0%} on the pool's other versions); nodes {r.get('node_names')}")
        subject = f"{r.get('pool')}|{r.get('driver_version')}"
        out.append(row("pin_driver", {"node": r.get("node_names")}, evidence=evidence, waste=rate.monthly(waste),
                       share=1.0, not_counted=NOT_COUNTED, basis=rate.basis("GPU time of failed starts", waste),
                       action=f"Move the {r.get('pool')} nodes off driver {r.get('driver_version')} "
                              "(pin the pool to the version its other nodes run)", subject=subject,
                       target=r.get("driver_version")))
    return out


def _unhealthy(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame):
        if not present(r.get("pods")):
            continue  # nothing allocated on it: an alert for the platform team, not a cost
        waste = number(r.get("allocated_usd_at_risk"))
        kind = "cordon_gpu" if r.get("severity") == "hardware" else "investigate_xid"
        what = f"XID {number(r.get('code')):.0f}" if r.get("kind") == "xid" else str(r.get("kind"))
        evidence = f"{what} ({r.get('severity')}), {number(r.get('events')):.0f} event(s) since {r.get('first_ts')}; pods {r.get('pods')}"
        action = (f"Cordon {r.get('node')}, drain GPU {r.get('gpu_uuid')} and have it reset or RMA'd"
                  if kind == "cordon_gpu" else f"Ask the owners of {r.get('pods')} about {what} (usually the application)")
        out.append(row(kind, {**r, "namespace": None, "pod": None, "team": r.get("teams")}, evidence=evidence,
                       waste=rate.monthly(waste), share=0.0, not_counted=NOT_COUNTED,
                       basis=rate.basis("allocated cost on the failing GPU", waste) + "; at stake, not counted as savings",
                       action=action, subject=f"{r.get('gpu_uuid')}|{r.get('kind')}|{r.get('code')}"))
    return out
