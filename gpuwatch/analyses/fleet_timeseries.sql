-- Fleet over time: GPUs allocated-busy, allocated-idle and unallocated per bucket, reported vs effective utilization, and cost.
-- params: $start, $end (timestamps, window [start, end)), $bucket_seconds (seconds), $idle_below (ratio)
-- columns: scope, bucket_start, gpus, allocated_busy_gpus, allocated_idle_gpus, unallocated_gpus, reported_util, effective_util, cost_usd, busy_cost_usd, idle_cost_usd, unallocated_cost_usd, fleet_gpus, fleet_cost_usd, not_sampled_gpus, not_sampled_cost_usd
-- scope 'bucket' rows: one per bucket (buckets start at $start); one scope 'window' row: the whole
-- window's totals (bucket_start = $start), from the same scan.
-- fleet_gpus / fleet_cost_usd: every GPU in stg_gpus (priced ones for the cost) over the bucket's
-- part of the window, the chargeback's fleet cost definition, so the window row's fleet_cost_usd
-- is chargeback's fleet cost; not_sampled_* = fleet minus what the samples cover (scrape gaps,
-- MIG capacity no instance holds), so a chart stacking the parts totals the fleet.
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
    -- idle as docs/architecture.md#finding-semantics defines it (reported and, where known, effective below the threshold)
    -- the bucket's index, not time_bucket(): integer arithmetic on epoch seconds is ~3x cheaper per row
    SELECT CAST(floor((epoch(ts) - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT) AS bucket,
           gpu_share AS weight, usd_per_hour, reported, effective,
           pod IS NOT NULL AS allocated,
           pod IS NOT NULL AND is_idle(reported, effective, $idle_below) AS idle
    FROM window_samples
),
grouped AS (
    SELECT CASE WHEN grouping(c.bucket) = 1 THEN 'window' ELSE 'bucket' END AS scope,
           $start::TIMESTAMP + to_seconds(coalesce(c.bucket, 0) * $bucket_seconds) AS bucket_start,
           any_value(step.seconds) AS step_seconds,
           exact_sum(weight) AS w, exact_sum(CASE WHEN allocated AND NOT idle THEN weight END) AS w_busy,
           exact_sum(CASE WHEN idle THEN weight END) AS w_idle, exact_sum(CASE WHEN NOT allocated THEN weight END) AS w_free,
           exact_sum(CASE WHEN allocated THEN reported * weight END) AS reported_sum,
           exact_sum(CASE WHEN allocated AND reported IS NOT NULL THEN weight END) AS reported_w,
           exact_sum(CASE WHEN allocated THEN effective * weight END) AS effective_sum,
           exact_sum(CASE WHEN allocated AND effective IS NOT NULL THEN weight END) AS effective_w,
           exact_sum(usd_per_hour) AS usd, exact_sum(CASE WHEN allocated AND NOT idle THEN usd_per_hour END) AS usd_busy,
           exact_sum(CASE WHEN idle THEN usd_per_hour END) AS usd_idle, exact_sum(CASE WHEN NOT allocated THEN usd_per_hour END) AS usd_free
    FROM classified c CROSS JOIN step
    GROUP BY GROUPING SETS ((c.bucket), ())
),
fleet AS (
    SELECT count(*) AS gpus, exact_sum(usd_per_gpu_hour) AS usd_per_hour FROM stg_gpus
),
all_buckets AS (
    -- every bucket of the window, sampled or not (the fleet costs money in a bucket without samples);
    -- the window row only when the window has samples at all
    SELECT 'bucket' AS scope, $start::TIMESTAMP + to_seconds(b * $bucket_seconds) AS bucket_start
    FROM range(0, CAST(ceil((epoch($end::TIMESTAMP) - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT)) t(b)
    WHERE EXISTS (SELECT 1 FROM grouped WHERE w IS NOT NULL)
    UNION ALL
    SELECT scope, bucket_start FROM grouped WHERE scope = 'window' AND w IS NOT NULL
),
filled AS (
    SELECT a.scope, a.bucket_start,
           CASE WHEN a.scope = 'window' THEN epoch($end::TIMESTAMP) - epoch($start::TIMESTAMP)
                ELSE $bucket_seconds END AS span_seconds,
           coalesce(g.step_seconds, 0) AS step_seconds, coalesce(g.w, 0) AS w, g.w_busy, g.w_idle, g.w_free,
           g.reported_sum, g.reported_w, g.effective_sum, g.effective_w, g.usd, g.usd_busy, g.usd_idle, g.usd_free
    FROM all_buckets a LEFT JOIN grouped g USING (scope, bucket_start)
),
final AS (
    SELECT scope, bucket_start,
           w * step_seconds / span_seconds AS gpus,
           coalesce(w_busy, 0) * step_seconds / span_seconds AS allocated_busy_gpus,
           coalesce(w_idle, 0) * step_seconds / span_seconds AS allocated_idle_gpus,
           coalesce(w_free, 0) * step_seconds / span_seconds AS unallocated_gpus,
           reported_sum / reported_w AS reported_util,
           effective_sum / effective_w AS effective_util,
           coalesce(usd, 0) * step_seconds / 3600.0 AS cost_usd,
           coalesce(usd_busy, 0) * step_seconds / 3600.0 AS busy_cost_usd,
           coalesce(usd_idle, 0) * step_seconds / 3600.0 AS idle_cost_usd,
           coalesce(usd_free, 0) * step_seconds / 3600.0 AS unallocated_cost_usd,
           fleet.gpus AS fleet_gpus,
           coalesce(fleet.usd_per_hour, 0) * covered_seconds / 3600.0 AS fleet_cost_usd,
           fleet_gpus - gpus AS not_sampled_gpus,
           fleet_cost_usd - cost_usd AS not_sampled_cost_usd
    FROM (SELECT *, least(span_seconds, epoch($end::TIMESTAMP) - epoch(bucket_start)) AS covered_seconds FROM filled)
    CROSS JOIN fleet
)
SELECT * FROM final ORDER BY scope, bucket_start
