-- Blocked demand: pending pods with a whole-GPU request, whether enough GPUs were free in their pool while no node could take them (fragmentation), why, the opportunity cost and the cheapest defragmentation move.
-- params: $start, $end (timestamps, window [start, end)), $blocked_min_seconds (seconds); the finisher reads capacity_bucket_seconds
-- columns: namespace, pod, job, team, gpu_model, gpus_requested, pending_from, pending_until, wait_hours, blocked_hours, max_free_gpus, max_free_block, verdict, why, opportunity_usd, defrag_node, defrag_pods, defrag_gpus_moved
-- docs/architecture.md#topology. A pod's first Pending episode (stg_pod_status): from its created_ts (else its
-- first Pending row) until its scheduled_ts, else its first later row that is not Pending (a row of unknown
-- phase ends it too: ingest writes one when a pod stops being reported, e.g. deleted while pending), else the data's last row,
-- clipped to the window. A pod waited when the scheduler marked it unschedulable; where that is unknown (no
-- unschedulable values), when it waited at least $blocked_min_seconds. Only whole-GPU requests (gpu_resource nvidia.com/gpu or unknown, gpu_request > 0);
-- MIG and time-sliced requests are not about GPU blocks. Record kinds, finished by blocked_demand.py (which
-- takes the free GPUs per node and bucket from schedulable_capacity.sql, one allocation history):
--   pending one per pending pod: namespace, pod, job, team, gpus_requested, pending_from, pending_until,
--           node_selector (JSON object text; NULL = any node)
--   node    one per node with whole GPUs: node, gpu_model, gpus, labels (JSON text), usd_per_gpu_hour (its
--           cheapest priced GPU; NULL unpriced)
WITH data_end AS (
    SELECT least($end::TIMESTAMP, coalesce(greatest((SELECT max(ts) FROM stg_sample_rows), (SELECT max(ts) FROM stg_pod_status),
                                                    (SELECT max(greatest(start_ts, coalesce(end_ts, start_ts))) FROM stg_pods)),
                                           $end::TIMESTAMP)) AS ts
),
first_pending AS (
    SELECT namespace, pod, min(ts) AS first_ts, least(coalesce(min(created_ts), min(ts)), min(ts)) AS pending_from
    FROM stg_pod_status WHERE lower(phase) = 'pending' GROUP BY namespace, pod
),
episodes AS (
    SELECT s.namespace, s.pod, f.pending_from,
           least(coalesce(min(s.scheduled_ts) FILTER (WHERE s.scheduled_ts >= f.pending_from), (SELECT ts FROM data_end)),
                 coalesce(min(s.ts) FILTER (WHERE coalesce(lower(s.phase), '') <> 'pending' AND s.ts > f.first_ts),
                          (SELECT ts FROM data_end)),
                 (SELECT ts FROM data_end)) AS pending_until,
           max(s.gpu_request) FILTER (WHERE lower(s.phase) = 'pending') AS gpus_requested,
           arg_max(s.gpu_resource, s.ts) FILTER (WHERE s.gpu_resource IS NOT NULL) AS gpu_resource,
           arg_max(s.node_selector, s.ts) FILTER (WHERE s.node_selector IS NOT NULL) AS node_selector,
           arg_max(s.job, s.ts) FILTER (WHERE s.job IS NOT NULL) AS job,
           bool_or(s.unschedulable = 1) AS unschedulable, count(s.unschedulable) > 0 AS unschedulable_known
    FROM stg_pod_status s
    JOIN first_pending f USING (namespace, pod)
    GROUP BY s.namespace, s.pod, f.pending_from, f.first_ts
),
pending AS (
    SELECT 'pending' AS kind, e.namespace, e.pod, e.job,
           coalesce(p.team, namespace_team(e.namespace), e.namespace) AS team, e.gpus_requested,
           greatest(e.pending_from, $start::TIMESTAMP) AS pending_from,
           least(e.pending_until, $end::TIMESTAMP) AS pending_until, e.node_selector
    FROM episodes e
    LEFT JOIN stg_pods p USING (namespace, pod)
    WHERE e.gpus_requested > 0 AND coalesce(e.gpu_resource, 'nvidia.com/gpu') = 'nvidia.com/gpu'
      AND greatest(e.pending_from, $start::TIMESTAMP) < least(e.pending_until, $end::TIMESTAMP)
      AND (e.unschedulable OR (NOT e.unschedulable_known
                               AND epoch(e.pending_until) - epoch(e.pending_from) >= $blocked_min_seconds))
),
nodes AS (
    SELECT 'node' AS kind, g.node, min(g.gpu_model) AS gpu_model, count(*) AS gpus,
           CAST(any_value(n.labels) AS VARCHAR) AS labels, min(g.usd_per_gpu_hour) AS usd_per_gpu_hour
    FROM stg_gpus g
    LEFT JOIN stg_nodes n USING (node)
    WHERE NOT g.mig
    GROUP BY g.node
),
final AS (
    SELECT * FROM pending UNION ALL BY NAME SELECT * FROM nodes
)
SELECT * FROM final ORDER BY kind, namespace, pod, node
