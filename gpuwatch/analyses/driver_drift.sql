-- Driver drift: GPU pools whose nodes run different NVIDIA drivers, and which driver version pods fail to start on.
-- params: $start, $end (timestamps, window [start, end)), $drift_min_failures (count), $drift_rate_ratio (ratio), $drift_start_seconds (seconds), $drift_pool_label (a node label key, '' = none)
-- columns: pool, driver_version, cuda_driver_version, nodes, gpus, pods_started, failed_starts, failure_rate, others_failure_rate, blamed, gpu_hours_lost, usd_lost, recommendation, node_names
-- docs/architecture.md#finding-semantics. A pool is a GPU model (stg_gpus), and with $drift_pool_label
-- set, that node label's value too ("<model> / <value>"; nodes without the label: the model alone), e.g.
-- a node pool label, so pools that are meant to differ are not compared; a node's driver is its devices rows' driver_version / cuda_driver_version (the first by
-- text if they disagree). A pool drifts when its nodes run two or more known driver_version or
-- cuda_driver_version values; it gets one row per driver_version (cuda_driver_version: that group's
-- values, comma-joined), NULL versions as one 'unknown' group that never drifts a pool, is never
-- blamed and is no other version's baseline (its nodes may run any of them). A pool on one version yields nothing.
-- pods_started: pods-file allocations on the group's nodes (of the pool's model) starting in the
-- window; pods known only from pod_status have no node and are not counted.
-- failed_starts: those of them whose pod_status (any container) shows a waiting reason
-- CrashLoopBackOff, CreateContainerError, RunContainerError or CreateContainerConfigError while the
-- pod ran in the window, or a non-zero last_exit_code recorded within $drift_start_seconds of the pod's
-- start (a start that dies young). failure_rate = failed_starts / pods_started.
-- others_failure_rate: the pool's other known versions together (their failed / their started).
-- blamed: a known version, with another known version in the pool, failed_starts >= $drift_min_failures
-- and failure_rate >= $drift_rate_ratio x others_failure_rate (others with no failures, or no starts:
-- any rate counts).
-- gpu_hours_lost: the failing pods' GPU equivalents (gpu_count, a MIG pod's share of its GPU) x their
-- allocated time in the window (open allocations: to the window's end); usd_lost the same time at
-- their price (NULL when a failing pod is unpriced, never $0).
-- recommendation (blamed rows; NULL otherwise): pin the pool to the other known version with the
-- lowest failure rate (then most pods started), or upgrade.
WITH node_drivers AS (
    SELECT node, min(driver_version) AS driver_version, min(cuda_driver_version) AS cuda_driver_version
    FROM stg_devices
    GROUP BY node
),
members AS (
    -- each node's GPUs of one model, with its driver
    SELECT g.gpu_model || coalesce(' / ' || CASE WHEN $drift_pool_label <> '' THEN l.labels ->> $drift_pool_label END, '')
               AS pool, g.gpu_model, g.node, n.driver_version, n.cuda_driver_version, count(*) AS gpus
    FROM stg_gpus g
    JOIN node_drivers n USING (node)
    LEFT JOIN stg_nodes l USING (node)
    WHERE g.gpu_model IS NOT NULL
    GROUP BY ALL
),
drifting AS (
    SELECT pool FROM members
    GROUP BY pool
    HAVING count(DISTINCT driver_version) >= 2 OR count(DISTINCT cuda_driver_version) >= 2
),
started AS (
    SELECT m.pool, m.driver_version, p.namespace, p.pod, p.start_ts, p.gpu_equivalents, p.usd_per_hour,
           (epoch(least(coalesce(p.end_ts, $end::TIMESTAMP), $end::TIMESTAMP)) - epoch(p.start_ts)) / 3600.0 AS hours
    FROM stg_pods p
    JOIN members m ON m.node = p.node AND m.gpu_model = p.gpu_model
    WHERE m.pool IN (SELECT pool FROM drifting) AND p.start_ts >= $start AND p.start_ts < $end
),
failed AS (
    SELECT DISTINCT p.namespace, p.pod
    FROM started p
    JOIN stg_pod_status s ON s.namespace = p.namespace AND s.pod = p.pod
    WHERE s.ts < $end AND coalesce(s.until_ts, $end::TIMESTAMP) > p.start_ts
      AND (s.waiting_reason IN ('CrashLoopBackOff', 'CreateContainerError', 'RunContainerError',
                                'CreateContainerConfigError')
           OR (s.last_exit_code <> 0 AND s.ts >= p.start_ts AND s.ts < p.start_ts + to_seconds($drift_start_seconds)))
),
outcomes AS (
    SELECT s.pool, s.driver_version, count(*) AS pods_started, count(f.pod) AS failed_starts,
           coalesce(exact_sum(CASE WHEN f.pod IS NOT NULL THEN s.gpu_equivalents * s.hours END), 0) AS gpu_hours_lost,
           CASE WHEN NOT coalesce(bool_or(f.pod IS NOT NULL AND s.usd_per_hour IS NULL), FALSE)
                THEN coalesce(exact_sum(CASE WHEN f.pod IS NOT NULL THEN s.usd_per_hour * s.hours END), 0) END AS usd_lost
    FROM started s
    LEFT JOIN failed f USING (namespace, pod)
    GROUP BY s.pool, s.driver_version
),
versions AS (
    SELECT m.pool, m.driver_version,
           string_agg(DISTINCT m.cuda_driver_version, ',' ORDER BY m.cuda_driver_version) AS cuda_driver_version,
           count(DISTINCT m.node) AS nodes, CAST(sum(m.gpus) AS BIGINT) AS gpus,
           string_agg(DISTINCT m.node, ',' ORDER BY m.node) AS node_names,
           coalesce(any_value(o.pods_started), 0) AS pods_started, coalesce(any_value(o.failed_starts), 0) AS failed_starts,
           coalesce(any_value(o.gpu_hours_lost), 0) AS gpu_hours_lost,
           CASE WHEN any_value(o.pool) IS NULL THEN 0.0 ELSE any_value(o.usd_lost) END AS usd_lost
    FROM members m
    LEFT JOIN outcomes o ON o.pool = m.pool AND o.driver_version IS NOT DISTINCT FROM m.driver_version
    WHERE m.pool IN (SELECT pool FROM drifting)
    GROUP BY m.pool, m.driver_version
),
compared AS (
    -- each version against the pool's other known versions together
    SELECT v.*, v.failed_starts / nullif(v.pods_started, 0) AS failure_rate,
           (SELECT sum(o.failed_starts) / nullif(sum(o.pods_started), 0) FROM versions o
            WHERE o.pool = v.pool AND o.driver_version IS NOT NULL
              AND o.driver_version IS DISTINCT FROM v.driver_version) AS others_failure_rate,
           (SELECT count(*) FROM versions o
            WHERE o.pool = v.pool AND o.driver_version IS NOT NULL
              AND o.driver_version IS DISTINCT FROM v.driver_version) AS other_versions,
           (SELECT arg_min(o.driver_version, [(o.failure_rate IS NULL)::DOUBLE, coalesce(o.failure_rate, 0),
                                              -o.pods_started])
            FROM (SELECT *, failed_starts / nullif(pods_started, 0) AS failure_rate FROM versions) o
            WHERE o.pool = v.pool AND o.driver_version IS NOT NULL
              AND o.driver_version IS DISTINCT FROM v.driver_version) AS best_other
    FROM versions v
),
final AS (
    SELECT pool, coalesce(driver_version, 'unknown') AS driver_version,
           coalesce(cuda_driver_version, 'unknown') AS cuda_driver_version, nodes, gpus, pods_started, failed_starts,
           failure_rate, others_failure_rate,
           coalesce(driver_version IS NOT NULL AND other_versions > 0 AND failed_starts >= $drift_min_failures
                    AND failure_rate >= $drift_rate_ratio * coalesce(others_failure_rate, 0), FALSE) AS blamed,
           gpu_hours_lost, usd_lost,
           CASE WHEN blamed THEN 'jobs fail on driver ' || driver_version || ': pin the pool to driver '
                                 || best_other || ' / upgrade' END AS recommendation,
           node_names
    FROM compared
)
SELECT * FROM final ORDER BY pool, blamed DESC, failure_rate DESC NULLS LAST, driver_version
