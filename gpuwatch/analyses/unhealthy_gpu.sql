-- Unhealthy GPUs: GPUs with health events (XID, ECC double-bit, row-remap failure, lost) in the window, the pods on them and the allocated cost at risk.
-- params: $start, $end (timestamps, window [start, end))
-- columns: node, gpu_uuid, gpu_model, kind, code, severity, first_ts, last_ts, events, pods, teams, usd_per_gpu_hour, at_risk_hours, allocated_usd_at_risk, recommendation
-- docs/architecture.md#finding-semantics. One row per (node, gpu_uuid, kind, and the XID code for
-- kind xid) with events in the window (stg_health); for ecc_dbe, code = the double-bit errors the
-- window's events carry in total. severity:
--   hardware     ecc_dbe, row_remap_failure, lost, and XIDs that mean the GPU itself failed: 48 (ECC
--                double-bit error), 63/64 (row remap or page retirement recorded / failed), 92 (high
--                single-bit ECC rate), 94/95 (contained / uncontained ECC error) -- memory; 79 (fell off
--                the bus), 74 (NVLink error), 61/62 (internal micro-controller halt), 119/120 (GSP
--                timeout / error);
--   application  XIDs that are usually the workload's own fault: 13 (graphics engine exception),
--                31 (GPU memory page fault), 43 (GPU stopped processing: a user app fault), 45
--                (preemptive cleanup after an earlier error, e.g. a killed process);
--   unknown      any other XID: the code is kept; look it up in NVIDIA's XID catalogue.
-- pods / teams: the pods holding the GPU (or one of its MIG instances: they count for their GPU) at
-- or after the first event, comma-joined and sorted ("namespace/pod"; teams as stg_pods). A pod holds
-- it while its pods-file allocation lists the GPU's UUID (or a legacy MIG-GPU-<uuid>/<gi>/<ci> id of
-- one of its instances: modern MIG-<uuid> ids name no parent, so those come from the samples) from
-- start_ts to end_ts (open: the window's end), or while samples attribute the pod to the GPU or an
-- instance of it (first sample .. last sample + one step; rows at or after the pod's end_ts are a
-- stale kubelet listing, not a hold). An unallocated GPU with events is listed too, with empty pods
-- and teams ('') and $0 at risk.
-- allocated_usd_at_risk = the GPU's price per GPU-hour (stg_gpus; a MIG GPU's whole price: a fault
-- takes every instance) x at_risk_hours, the hours from the first event until the last holder lets
-- go (the window's end at the latest); NULL when the GPU is held but unpriced (never $0).
WITH grouped AS (
    -- an XID groups by its code; the other kinds group whole (an ecc_dbe event's code is its error
    -- count: the row's code is then the window's total double-bit errors, NULL when no event said)
    SELECT node, gpu_uuid, kind, CASE WHEN kind = 'xid' THEN code END AS code_key,
           min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS events,
           sum(code) FILTER (WHERE kind = 'ecc_dbe') AS dbe_errors
    FROM stg_health
    WHERE ts >= $start AND ts < $end
    GROUP BY node, gpu_uuid, kind, code_key
),
events AS (
    SELECT node, gpu_uuid, kind, code_key, coalesce(code_key, dbe_errors) AS code, first_ts, last_ts, events
    FROM grouped
),
listed AS (
    -- allocations naming a GPU, or a legacy MIG-GPU-<uuid>/<gi>/<ci> id of one of its instances
    SELECT p.namespace, p.pod, p.team, p.node,
           regexp_replace(trim(d.id), '^MIG-(GPU-[^/]+)/.*$', '\1') AS gpu_uuid,
           p.start_ts AS held_from, coalesce(p.end_ts, $end::TIMESTAMP) AS held_until
    FROM stg_pods p, unnest(string_split(p.device_ids, ',')) AS d(id)
    WHERE nullif(trim(d.id), '') IS NOT NULL
),
pod_streams AS (
    -- streams naming a pod on a GPU with events, with the pod's team and allocation end
    SELECT k.stream_id, k.namespace, k.pod, coalesce(p.team, k.team, k.namespace) AS team, k.node, k.gpu_uuid,
           coalesce(k.step_seconds, 60.0) AS step_seconds, coalesce(p.end_ts, TIMESTAMP 'infinity') AS end_ts
    FROM stg_streams k
    LEFT JOIN stg_pods p ON p.namespace = k.namespace AND p.pod = k.pod
    WHERE k.pod IS NOT NULL AND k.gpu_uuid IN (SELECT gpu_uuid FROM events)
),
sampled AS (
    -- pods the samples attribute to a GPU or one of its instances, before their allocation ended
    SELECT k.namespace, k.pod, k.team, k.node, k.gpu_uuid,
           min(r.ts) AS held_from, max(r.ts) + to_seconds(any_value(k.step_seconds)) AS held_until
    FROM stg_sample_rows r
    JOIN pod_streams k USING (stream_id)
    WHERE r.ts >= $start AND r.ts < $end AND r.ts < k.end_ts
    GROUP BY k.stream_id, k.namespace, k.pod, k.team, k.node, k.gpu_uuid
),
holds AS (
    SELECT * FROM listed UNION ALL SELECT * FROM sampled
),
holders AS (
    -- per event group: who held the GPU at or after its first event, and until when
    SELECT e.node, e.gpu_uuid, e.kind, e.code_key,
           string_agg(DISTINCT h.namespace || '/' || h.pod, ',' ORDER BY h.namespace || '/' || h.pod) AS pods,
           string_agg(DISTINCT h.team, ',' ORDER BY h.team) AS teams,
           least(max(h.held_until), $end::TIMESTAMP) AS held_until
    FROM events e
    JOIN holds h
      ON h.gpu_uuid = e.gpu_uuid AND coalesce(h.node = e.node, TRUE)
     AND h.held_until > e.first_ts AND coalesce(h.held_from < $end::TIMESTAMP, TRUE)
    GROUP BY e.node, e.gpu_uuid, e.kind, e.code_key
),
classified AS (
    SELECT e.*,
           CASE WHEN e.kind IN ('ecc_dbe', 'row_remap_failure', 'lost') THEN 'hardware'
                WHEN e.kind = 'xid' AND e.code IN (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120) THEN 'hardware'
                WHEN e.kind = 'xid' AND e.code IN (13, 31, 43, 45) THEN 'application'
                ELSE 'unknown' END AS severity
    FROM events e
),
final AS (
    SELECT c.node, c.gpu_uuid, g.gpu_model, c.kind, c.code, c.severity, c.first_ts, c.last_ts, c.events,
           coalesce(h.pods, '') AS pods, coalesce(h.teams, '') AS teams, g.usd_per_gpu_hour,
           coalesce(greatest(epoch(h.held_until) - epoch(c.first_ts), 0) / 3600.0, 0) AS at_risk_hours,
           CASE WHEN h.pods IS NULL THEN 0.0
                ELSE g.usd_per_gpu_hour * greatest(epoch(h.held_until) - epoch(c.first_ts), 0) / 3600.0 END
               AS allocated_usd_at_risk,
           CASE c.severity
                WHEN 'hardware' THEN 'cordon, drain and RMA/reset the GPU'
                WHEN 'application' THEN 'check the workload (XID ' || c.code || ' is usually an application fault)'
                ELSE 'look up XID ' || coalesce(CAST(c.code AS VARCHAR), '?')
                     || ' in NVIDIA''s XID catalogue; cordon and reset the GPU if it repeats' END AS recommendation
    FROM classified c
    LEFT JOIN holders h
      ON h.node = c.node AND h.gpu_uuid = c.gpu_uuid AND h.kind = c.kind AND h.code_key IS NOT DISTINCT FROM c.code_key
    LEFT JOIN stg_gpus g ON g.node = c.node AND g.gpu_uuid = c.gpu_uuid
)
SELECT * FROM final ORDER BY severity <> 'hardware', severity = 'application', round(allocated_usd_at_risk, 6) DESC NULLS FIRST, node, gpu_uuid, kind, code
