-- Fleet over time: GPUs allocated-busy, allocated-idle and unallocated per bucket, reported vs effective utilization, and cost.
-- params: $start, $end (timestamps, window [start, end)), $bucket_seconds (seconds), $idle_below (ratio)
-- columns: bucket_start, gpus, allocated_busy_gpus, allocated_idle_gpus, unallocated_gpus, reported_util, effective_util, cost_usd, busy_cost_usd, idle_cost_usd, unallocated_cost_usd
-- Buckets start at $start; a bucket as long as the window gives the window's totals.
-- Each sample stands for stg_samples.gpu_share of a GPU (a MIG instance its slices / 7, a
-- time-sliced replica its share) at stg_samples.usd_per_hour. GPU counts are bucket averages
-- (share x step / bucket length); utilizations are share-weighted means over allocated samples.
WITH window_samples AS (
    SELECT * FROM stg_samples WHERE ts >= $start AND ts < $end
),
step AS (
    SELECT coalesce(median(gap), 60) AS seconds
    FROM (SELECT epoch(ts) - lag(epoch(ts)) OVER (ORDER BY ts) AS gap
          FROM (SELECT DISTINCT ts FROM window_samples))
    WHERE gap > 0
),
classified AS (
    -- idle as DESIGN §5 defines it (reported and, where known, effective below the threshold)
    SELECT time_bucket(to_seconds($bucket_seconds), ts, $start::TIMESTAMP) AS bucket_start,
           gpu_share AS weight, usd_per_hour, reported, effective,
           pod IS NOT NULL AS allocated,
           pod IS NOT NULL AND reported < $idle_below AND coalesce(effective, 0) < $idle_below AS idle
    FROM window_samples
),
final AS (
    SELECT c.bucket_start,
           sum(weight) * any_value(step.seconds) / $bucket_seconds AS gpus,
           coalesce(sum(weight) FILTER (WHERE allocated AND NOT idle), 0) * any_value(step.seconds) / $bucket_seconds AS allocated_busy_gpus,
           coalesce(sum(weight) FILTER (WHERE idle), 0) * any_value(step.seconds) / $bucket_seconds AS allocated_idle_gpus,
           coalesce(sum(weight) FILTER (WHERE NOT allocated), 0) * any_value(step.seconds) / $bucket_seconds AS unallocated_gpus,
           sum(reported * weight) FILTER (WHERE allocated) / sum(weight) FILTER (WHERE allocated AND reported IS NOT NULL) AS reported_util,
           sum(effective * weight) FILTER (WHERE allocated) / sum(weight) FILTER (WHERE allocated AND effective IS NOT NULL) AS effective_util,
           coalesce(sum(usd_per_hour), 0) * any_value(step.seconds) / 3600.0 AS cost_usd,
           coalesce(sum(usd_per_hour) FILTER (WHERE allocated AND NOT idle), 0) * any_value(step.seconds) / 3600.0 AS busy_cost_usd,
           coalesce(sum(usd_per_hour) FILTER (WHERE idle), 0) * any_value(step.seconds) / 3600.0 AS idle_cost_usd,
           coalesce(sum(usd_per_hour) FILTER (WHERE NOT allocated), 0) * any_value(step.seconds) / 3600.0 AS unallocated_cost_usd
    FROM classified c CROSS JOIN step
    GROUP BY c.bucket_start
)
SELECT * FROM final ORDER BY bucket_start
