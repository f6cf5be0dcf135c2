-- Topology placement: per multi-GPU pod and per multi-pod job, its worst GPU link, NUMA split and nodes spanned, whether a better-connected block was free when it started, and the estimated penalty.
-- params: $start, $end (timestamps, window [start, end)); the finisher reads placement_comm_share and placement_numa_penalty (ratios)
-- columns: scope, namespace, pod, job, team, nodes, gpu_model, gpus, start_ts, end_ts, worst_link, numa_nodes, nodes_spanned, min_nodes, better_link, better_gpus, nvlink_bytes_per_second, verdict, reason, penalty_share, gpu_hours, cost_usd, penalty_usd, link_matrix
-- docs/architecture.md#topology. Whole GPUs only: a node's GPUs are numbered 0.. by (gpu_index, gpu_uuid)
-- and a pod's GPUs (its device_ids matched to them) are a bit mask. A pod is judged (whole) when it holds
-- no MIG instance and is not time-sliced (gpu_resource *.shared or a fractional gpu_count); every pod
-- listing a GPU holds it over [start_ts, end_ts) for the free sets. A pod's job: its latest
-- stg_pod_status job, else its owner (kind/name). Record kinds, finished by topology_placement.py:
--   gpu  one per whole GPU: node, position, gpu_uuid, gpu_index, gpu_model, numa_node, nvlink_clique
--   link one per known ordered pair (stg_topology): node, position, peer_position, link, nvlinks
--   pod  one per allocation holding whole GPUs and live from the earliest judged start: namespace, pod,
--        node, team, job, start_ts, end_ts, gpu_count, mask, matched, whole, gpu_hours and cost_usd
--        (inside the window; an open pod runs until the data's last row), nvlink_sum and nvlink_samples
--        (tx + rx bytes/s over its samples in the window with both known)
WITH devices AS (
    -- one scan of stg_devices: a GPU with MIG instance rows is MIG-enabled
    SELECT node, gpu_uuid, gpu_model, gpu_index, numa_node, nvlink_clique, mig_gi_id,
           bool_or(mig_gi_id IS NOT NULL) OVER (PARTITION BY node, gpu_uuid) AS mig
    FROM stg_devices
),
gpus AS (
    SELECT node, gpu_uuid, gpu_model, gpu_index, numa_node, nvlink_clique,
           CAST(row_number() OVER (PARTITION BY node ORDER BY gpu_index NULLS LAST, gpu_uuid) - 1 AS INTEGER)
               AS position
    FROM devices
    WHERE mig_gi_id IS NULL AND NOT mig
),
links AS (
    SELECT a.node, a.position, b.position AS peer_position, t.link, t.nvlinks
    FROM stg_topology t
    JOIN gpus a ON a.node = t.node AND a.gpu_uuid = t.gpu_uuid
    JOIN gpus b ON b.node = t.node AND b.gpu_uuid = t.peer_gpu_uuid
),
pod_jobs AS (
    SELECT namespace, pod, arg_max(job, ts) AS job FROM stg_pod_status WHERE job IS NOT NULL GROUP BY namespace, pod
),
pod_rows AS (
    SELECT namespace, pod, node, team, start_ts, end_ts, gpu_count, usd_per_hour, owner_kind, owner_name,
           mig_profile, gpu_resource, device_ids
    FROM stg_pods
    WHERE nullif(device_ids, '') IS NOT NULL AND start_ts IS NOT NULL AND start_ts < $end::TIMESTAMP
),
data_end AS (
    SELECT least($end::TIMESTAMP, coalesce(greatest((SELECT max(ts) FROM stg_sample_rows), (SELECT max(ts) FROM stg_pod_status),
                                                    (SELECT max(greatest(start_ts, coalesce(end_ts, start_ts))) FROM pod_rows)),
                                           $end::TIMESTAMP)) AS ts
),
pod_devices AS (
    SELECT namespace, pod, trim(unnest(string_split(device_ids, ','))) AS gpu_uuid FROM pod_rows
),
allocations AS (
    SELECT p.namespace, p.pod, p.node, p.team, p.start_ts, p.end_ts, p.gpu_count, p.usd_per_hour,
           coalesce(j.job, nullif(p.owner_kind, '') || '/' || nullif(p.owner_name, '')) AS job,
           p.mig_profile IS NULL AND coalesce(p.gpu_resource, '') NOT LIKE '%.shared' AND p.gpu_count = floor(p.gpu_count)
               AS whole,
           bit_or(CASE WHEN g.position < 62 THEN CAST(1 AS BIGINT) << g.position END) AS mask,
           count(*) AS matched
    FROM pod_rows p
    JOIN pod_devices d USING (namespace, pod)
    JOIN gpus g ON g.node = p.node AND g.gpu_uuid = d.gpu_uuid
    LEFT JOIN pod_jobs j USING (namespace, pod)
    GROUP BY ALL
),
candidates AS (
    SELECT * FROM allocations WHERE whole AND (end_ts IS NULL OR end_ts > $start::TIMESTAMP)
),
judged AS (
    -- multi-GPU pods and the pods of jobs with several (the finisher checks that they overlap)
    SELECT * FROM candidates
    WHERE matched >= 2
       OR (namespace, job) IN (SELECT (namespace, job) FROM candidates WHERE job IS NOT NULL
                               GROUP BY namespace, job HAVING count(*) >= 2)
),
live AS (
    SELECT * FROM allocations
    WHERE end_ts IS NULL OR end_ts > (SELECT min(start_ts) FROM judged)
),
judged_streams AS MATERIALIZED (
    SELECT s.stream_id, s.namespace, s.pod FROM stg_streams s SEMI JOIN judged j USING (namespace, pod)
),
evidence_parts AS (
    -- the judged pods' NVLink traffic (tx + rx bytes/s where both are known) as exact parts: the hourly
    -- rollup's hours where it is current, the rows at the window's partial edges or when it is not
    SELECT h.stream_id, h.rows_nvlink_part AS part, h.rows_nvlink_n AS n
    FROM rollup_hours($start, $end, NULL, NULL, NULL) h
    WHERE h.stream_id IN (SELECT stream_id FROM judged_streams)
    UNION ALL
    SELECT r.stream_id, exact_part(r.nvlink_tx_bytes_per_second + r.nvlink_rx_bytes_per_second),
           count(r.nvlink_tx_bytes_per_second + r.nvlink_rx_bytes_per_second)
    FROM stg_sample_rows r
    WHERE r.ts >= $start::TIMESTAMP AND r.ts < rollup_rows_before($start, $end, NULL, NULL, NULL)
      AND r.stream_id IN (SELECT stream_id FROM judged_streams)
    GROUP BY r.stream_id
    UNION ALL
    SELECT r.stream_id, exact_part(r.nvlink_tx_bytes_per_second + r.nvlink_rx_bytes_per_second),
           count(r.nvlink_tx_bytes_per_second + r.nvlink_rx_bytes_per_second)
    FROM stg_sample_rows r
    WHERE r.ts >= rollup_rows_after($start, $end, NULL, NULL, NULL) AND r.ts < $end::TIMESTAMP
      AND r.stream_id IN (SELECT stream_id FROM judged_streams)
    GROUP BY r.stream_id
),
evidence AS (
    SELECT k.namespace, k.pod, exact_total(e.part) AS nvlink_sum, CAST(sum(e.n) AS BIGINT) AS nvlink_samples
    FROM evidence_parts e
    JOIN judged_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod
),
pods AS (
    SELECT 'pod' AS kind, a.namespace, a.pod, a.node, a.team, a.job, a.start_ts, a.end_ts, a.gpu_count, a.mask,
           a.matched, a.whole,
           a.gpu_count * greatest(epoch(least(coalesce(a.end_ts, (SELECT ts FROM data_end)), $end::TIMESTAMP))
                                  - epoch(greatest(a.start_ts, $start::TIMESTAMP)), 0) / 3600.0 AS gpu_hours,
           a.usd_per_hour * greatest(epoch(least(coalesce(a.end_ts, (SELECT ts FROM data_end)), $end::TIMESTAMP))
                                     - epoch(greatest(a.start_ts, $start::TIMESTAMP)), 0) / 3600.0 AS cost_usd,
           e.nvlink_sum, e.nvlink_samples
    FROM live a
    LEFT JOIN evidence e USING (namespace, pod)
),
final AS (
    SELECT 'gpu' AS kind, node, gpu_model, gpu_uuid, gpu_index, numa_node, nvlink_clique, position FROM gpus
    UNION ALL BY NAME
    SELECT 'link' AS kind, node, position, peer_position, link, nvlinks FROM links
    UNION ALL BY NAME
    SELECT * FROM pods
)
SELECT * FROM final ORDER BY kind, node, position, peer_position, start_ts, namespace, pod
