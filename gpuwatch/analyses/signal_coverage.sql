-- Signal coverage: per GPU node, which evidence the store holds in the window (gpuwatch/signals.py).
-- params: $start, $end (timestamps, window [start, end))
-- columns: node, signal, observed, expected, present, note
-- One row per (GPU node, per-node signal) and one per cluster-wide signal (node NULL). observed: the
-- units of evidence found (sample rows with the value, pods with the field, links, priced GPUs ...);
-- expected: the units it could be found on (sample rows, pods, GPUs). present: observed > 0; NULL where
-- the store cannot tell absence from "nothing happened" (health events, GPU processes without rows:
-- `gpuwatch doctor` asks Prometheus whether their series exist).
-- The signal names are gpuwatch/signals.py's SIGNALS; findings/__init__.py NEEDS says who needs which.
WITH gpu_nodes AS (
    SELECT DISTINCT node FROM stg_devices
),
sampled AS (
    SELECT k.node, count(*) AS n_rows, count(r.reported) AS reported, count(r.sm_active) AS sm_active,
           count(r.tensor_active) AS tensor_active, count(r.dram_active) AS dram_active,
           count(r.fb_used_bytes) AS fb_used,
           count(coalesce(r.nvlink_tx_bytes_per_second, r.nvlink_rx_bytes_per_second)) AS nvlink
    FROM stg_sample_rows r
    JOIN stg_streams k USING (stream_id)
    WHERE r.ts >= $start AND r.ts < $end
    GROUP BY k.node
),
pods_in AS (
    -- raw pods (their own team label, before any namespace fallback) alive in the window
    SELECT * FROM pods
    WHERE (start_ts IS NULL OR start_ts < $end) AND (end_ts IS NULL OR end_ts >= $start)
),
pod_counts AS (
    SELECT node, count(*) AS n_pods, count(pod_uid) AS ksm_pods, count(nullif(trim(labels), '')) AS ksm_labels
    FROM pods_in GROUP BY node
),
status AS (
    SELECT p.node, count(DISTINCT CASE WHEN s.phase IS NOT NULL THEN p.namespace || '/' || p.pod END) AS ksm_status,
           count(DISTINCT CASE WHEN s.gpu_request IS NOT NULL THEN p.namespace || '/' || p.pod END) AS ksm_requests
    FROM stg_pod_status s
    JOIN pods_in p ON p.namespace = s.namespace AND p.pod = s.pod
    WHERE s.ts < $end AND coalesce(s.until_ts, $end) >= $start
    GROUP BY p.node
),
linked AS (
    SELECT node, count(*) AS links FROM stg_topology GROUP BY node
),
numa AS (
    SELECT node, count(DISTINCT gpu_uuid) AS gpus, count(DISTINCT CASE WHEN numa_node IS NOT NULL THEN gpu_uuid END) AS numa
    FROM stg_devices WHERE mig_gi_id IS NULL GROUP BY node
),
events AS (
    SELECT node, count(*) AS n FROM stg_health WHERE ts >= $start AND ts < $end GROUP BY node
),
procs AS (
    SELECT node, count(*) AS n FROM stg_processes WHERE ts >= $start AND ts < $end GROUP BY node
),
labelled AS (
    SELECT node, count(*) AS n FROM stg_nodes GROUP BY node
),
per_node AS (
    SELECT g.node, v.signal, v.observed, v.expected
    FROM gpu_nodes g
    LEFT JOIN sampled s USING (node)
    LEFT JOIN pod_counts p USING (node)
    LEFT JOIN status t USING (node)
    LEFT JOIN linked l USING (node)
    LEFT JOIN numa m USING (node)
    LEFT JOIN events e USING (node)
    LEFT JOIN procs c USING (node)
    LEFT JOIN labelled b USING (node)
    CROSS JOIN LATERAL (VALUES
        ('reported', coalesce(s.reported, 0), coalesce(s.n_rows, 0)),
        ('sm_active', coalesce(s.sm_active, 0), coalesce(s.n_rows, 0)),
        ('tensor_active', coalesce(s.tensor_active, 0), coalesce(s.n_rows, 0)),
        ('dram_active', coalesce(s.dram_active, 0), coalesce(s.n_rows, 0)),
        ('fb_used', coalesce(s.fb_used, 0), coalesce(s.n_rows, 0)),
        ('nvlink', coalesce(s.nvlink, 0), coalesce(s.n_rows, 0)),
        ('health', e.n, NULL),
        ('ksm_pods', coalesce(p.ksm_pods, 0), coalesce(p.n_pods, 0)),
        ('ksm_labels', coalesce(p.ksm_labels, 0), coalesce(p.n_pods, 0)),
        ('ksm_status', coalesce(t.ksm_status, 0), coalesce(p.n_pods, 0)),
        ('ksm_requests', coalesce(t.ksm_requests, 0), coalesce(p.n_pods, 0)),
        ('ksm_nodes', coalesce(b.n, 0), 1),
        ('topology', coalesce(l.links, 0) + coalesce(m.numa, 0), coalesce(m.gpus, 0)),
        ('processes', c.n, NULL)
    ) AS v(signal, observed, expected)
),
cluster AS (
    SELECT NULL AS node, 'pending' AS signal,
           (SELECT count(DISTINCT namespace || '/' || pod) FROM stg_pod_status
            WHERE (created_ts IS NOT NULL OR unschedulable IS NOT NULL) AND ts < $end) AS observed,
           (SELECT count(DISTINCT namespace || '/' || pod) FROM stg_pod_status WHERE ts < $end) AS expected
    UNION ALL
    SELECT NULL, 'prices', (SELECT count(*) FROM stg_gpus WHERE usd_per_gpu_hour IS NOT NULL), (SELECT count(*) FROM stg_gpus)
    UNION ALL
    SELECT NULL, 'teams',
           (SELECT count(*) FROM pods_in WHERE nullif(trim(team), '') IS NOT NULL OR namespace_team(namespace) IS NOT NULL),
           (SELECT count(*) FROM pods_in)
),
final AS (
    SELECT node, signal, CAST(observed AS BIGINT) AS observed, CAST(expected AS BIGINT) AS expected,
           CASE WHEN observed IS NULL THEN NULL ELSE observed > 0 END AS present,
           CASE WHEN observed IS NULL THEN 'no rows: the store keeps events, not whether their series were collected '
                                           || '(gpuwatch doctor --from prometheus://... checks)' END AS note
    FROM (SELECT * FROM per_node UNION ALL SELECT * FROM cluster)
)
SELECT * FROM final ORDER BY node NULLS LAST, signal
