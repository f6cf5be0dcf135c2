-- One GPU's signals over time (all its MIG instances and sharing pods together): utilization, memory, power and who held it, per bucket.
-- params: $start, $end (timestamps, window [start, end)), $node, $gpu_uuid (the GPU), $bucket_seconds (seconds)
-- columns: bucket_start, reported_util, effective_util, fb_used_bytes, power_watts, pods, holders
-- reported / effective as everywhere (docs/architecture.md#finding-semantics), means over the GPU's
-- samples; memory: the max of the per-timestamp sum over its instances/pods; power: the mean of the
-- per-timestamp max (every instance row carries the whole GPU's power). holders: namespace/pod
-- of the samples, sorted (empty = no pod held it). Temperature and error counters are not part of the
-- bundle: a drill-down shows them as unknown, never 0.
WITH gpu_samples AS (
    SELECT ts, namespace, pod, reported, effective, fb_used_bytes, power_watts
    FROM stg_samples
    WHERE ts >= $start AND ts < $end AND node = $node AND gpu_uuid = $gpu_uuid
),
per_ts AS (
    SELECT ts, exact_avg(reported) AS reported, exact_avg(effective) AS effective, exact_sum(fb_used_bytes) AS fb_used_bytes,
           max(power_watts) AS power_watts,
           list(DISTINCT namespace || '/' || pod) FILTER (WHERE pod IS NOT NULL) AS holders
    FROM gpu_samples
    GROUP BY ts
),
final AS (
    SELECT time_bucket(to_seconds($bucket_seconds), ts, $start::TIMESTAMP) AS bucket_start,
           exact_avg(reported) AS reported_util,
           exact_avg(effective) AS effective_util,
           max(fb_used_bytes) AS fb_used_bytes,
           exact_avg(power_watts) AS power_watts,
           len(list_distinct(flatten(list(holders)))) AS pods,
           array_to_string(list_sort(list_distinct(flatten(list(holders)))), ', ') AS holders
    FROM per_ts
    GROUP BY bucket_start
)
SELECT * FROM final ORDER BY bucket_start
