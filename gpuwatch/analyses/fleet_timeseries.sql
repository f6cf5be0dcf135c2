-- Fleet over time: GPUs allocated-busy, allocated-idle and unallocated per bucket, reported vs effective utilization, and cost.
-- params: $start, $end (timestamps, window [start, end)), $bucket_seconds (seconds), $idle_below (ratio)
-- columns: scope, bucket_start, gpus, allocated_busy_gpus, allocated_idle_gpus, unallocated_gpus, reported_util, effective_util, cost_usd, busy_cost_usd, idle_cost_usd, unallocated_cost_usd, fleet_gpus, fleet_cost_usd, not_sampled_gpus, not_sampled_cost_usd
-- scope 'bucket' rows: one per bucket (buckets start at $start); one scope 'window' row: the whole
-- window's totals (bucket_start = $start), from the same scan.
-- fleet_gpus / fleet_cost_usd: every GPU in stg_gpus (priced ones for the cost) over the time it is
-- known to exist in the bucket (stg_gpu_presence; fleet_gpus is the bucket average), the chargeback's
-- fleet cost definition, so the window row's fleet_cost_usd is chargeback's fleet cost; not_sampled_* = fleet minus what the samples cover (scrape gaps,
-- MIG capacity no instance holds), so a chart stacking the parts totals the fleet.
-- Each sample stands for its stream's step of stg_samples.gpu_share of a GPU (a MIG instance its
-- slices / 7, a time-sliced replica its share) at stg_samples.usd_per_hour. A stream's step is its series
-- step (stg_streams, as chargeback uses), else its node's (the median of the node's streams' series
-- steps: one exporter reads a node's devices together), else, on a node with no series at all, the median
-- interval between the node's own sample times in the window (one time: 60 s, staging's one-sample rule).
-- Never one step for the whole fleet: nodes sampled at other offsets (per-node /metrics files, exporter
-- bundles) would shrink it. GPU counts are bucket averages (GPU-seconds / bucket length); utilizations
-- are share-weighted means over allocated samples.
-- Buckets of whole clock hours (the default window: it ends on the hour; 1 h and 1 d buckets) add up
-- the hourly rollup's stored hours (store/rollup.sql) per stream; other buckets count the rows. Both
-- count the same way: per stream and hour (or bucket), then step, share and price applied per stream.
WITH node_series_steps AS (
    SELECT node, median(step_seconds) AS step_seconds FROM stg_streams WHERE step_seconds IS NOT NULL GROUP BY node
),
unstepped AS (
    -- streams of nodes with no series step
    SELECT stream_id, node FROM stg_streams WHERE node NOT IN (SELECT node FROM node_series_steps)
),
node_row_steps AS (
    SELECT node, median(gap) AS step_seconds
    FROM (SELECT node, epoch(ts) - lag(epoch(ts)) OVER (PARTITION BY node ORDER BY ts) AS gap
          FROM (SELECT DISTINCT u.node, r.ts FROM stg_sample_rows r JOIN unstepped u USING (stream_id)
                WHERE r.ts >= $start AND r.ts < $end))
    WHERE gap > 0
    GROUP BY node
),
stream_steps AS (
    SELECT k.stream_id, coalesce(k.step_seconds, n.step_seconds, r.step_seconds, 60.0) AS step_seconds
    FROM stg_streams k
    LEFT JOIN node_series_steps n USING (node)
    LEFT JOIN node_row_steps r USING (node)
),
counted AS (
    -- the bucket's index, not time_bucket(): integer arithmetic on epoch seconds is ~3x cheaper per row
    SELECT CAST(floor((epoch(h.hour) - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT) AS bucket, h.stream_id,
           h.rows_n, h.idle_n, h.busy_n, h.reported_part, h.reported_n, h.effective_part, h.effective_n
    FROM stream_hours($start, CASE WHEN rollup_hour_buckets($start::TIMESTAMP, $bucket_seconds) THEN $end ELSE $start END, $idle_below, NULL, NULL) h
    UNION ALL
    SELECT CAST(floor((epoch(ts) - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT) AS bucket, stream_id,
           count(*), count(*) FILTER (WHERE is_idle(reported, effective, $idle_below)),
           count(*) FILTER (WHERE NOT is_idle(reported, effective, $idle_below)),
           exact_part(reported), count(reported), exact_part(effective), count(effective)
    FROM stg_sample_rows
    WHERE ts >= $start AND ts < CASE WHEN rollup_hour_buckets($start::TIMESTAMP, $bucket_seconds) THEN $start ELSE $end END
    GROUP BY ALL
),
classified AS (
    -- idle as docs/architecture.md#finding-semantics defines it (reported and, where known, effective below the threshold)
    SELECT c.*, k.pod IS NOT NULL AS allocated, k.gpu_share AS share,
           k.gpu_share * t.step_seconds AS gpu_seconds_each, k.usd_per_hour * t.step_seconds / 3600.0 AS usd_each
    FROM counted c JOIN stg_streams k USING (stream_id) JOIN stream_steps t USING (stream_id)
),
grouped AS (
    SELECT CASE WHEN grouping(c.bucket) = 1 THEN 'window' ELSE 'bucket' END AS scope,
           $start::TIMESTAMP + to_seconds(coalesce(c.bucket, 0) * $bucket_seconds) AS bucket_start,
           exact_sum(rows_n * gpu_seconds_each) AS w,
           exact_sum(CASE WHEN allocated THEN busy_n * gpu_seconds_each END) AS w_busy,
           exact_sum(CASE WHEN allocated THEN idle_n * gpu_seconds_each END) AS w_idle,
           exact_sum(CASE WHEN NOT allocated THEN rows_n * gpu_seconds_each END) AS w_free,
           exact_sum(CASE WHEN allocated THEN CAST(reported_part AS DOUBLE) * share END) AS reported_sum,
           exact_sum(CASE WHEN allocated THEN reported_n * share END) AS reported_w,
           exact_sum(CASE WHEN allocated THEN CAST(effective_part AS DOUBLE) * share END) AS effective_sum,
           exact_sum(CASE WHEN allocated THEN effective_n * share END) AS effective_w,
           exact_sum(rows_n * usd_each) AS usd, exact_sum(CASE WHEN allocated THEN busy_n * usd_each END) AS usd_busy,
           exact_sum(CASE WHEN allocated THEN idle_n * usd_each END) AS usd_idle,
           exact_sum(CASE WHEN NOT allocated THEN rows_n * usd_each END) AS usd_free
    FROM classified c
    GROUP BY GROUPING SETS ((c.bucket), ())
),
present AS (
    -- each GPU's spans of known existence (stg_gpu_presence), cut into the buckets they overlap
    SELECT g.usd_per_gpu_hour, p.lo_s, p.hi_s FROM stg_gpu_presence($start, $end) p JOIN stg_gpus g USING (node, gpu_uuid)
),
fleet_parts AS (
    SELECT CAST(b.b AS BIGINT) AS bucket,
           least(p.hi_s, epoch($start::TIMESTAMP) + (b.b + 1) * $bucket_seconds)
               - greatest(p.lo_s, epoch($start::TIMESTAMP) + b.b * $bucket_seconds) AS seconds, p.usd_per_gpu_hour
    FROM present p,
         range(CAST(floor((p.lo_s - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT),
               CAST(ceil((p.hi_s - epoch($start::TIMESTAMP)) / $bucket_seconds) AS BIGINT)) b(b)
),
fleet AS (
    SELECT CASE WHEN grouping(bucket) = 1 THEN 'window' ELSE 'bucket' END AS scope,
           $start::TIMESTAMP + to_seconds(coalesce(bucket, 0) * $bucket_seconds) AS bucket_start,
           exact_sum(seconds) AS gpu_seconds, coalesce(exact_sum(seconds * usd_per_gpu_hour), 0) / 3600.0 AS fleet_usd
    FROM fleet_parts WHERE seconds > 0
    GROUP BY GROUPING SETS ((bucket), ())
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
           coalesce(g.w, 0) AS w, g.w_busy, g.w_idle, g.w_free,
           g.reported_sum, g.reported_w, g.effective_sum, g.effective_w, g.usd, g.usd_busy, g.usd_idle, g.usd_free
    FROM all_buckets a LEFT JOIN grouped g USING (scope, bucket_start)
),
final AS (
    SELECT scope, bucket_start,
           w / span_seconds AS gpus,
           coalesce(w_busy, 0) / span_seconds AS allocated_busy_gpus,
           coalesce(w_idle, 0) / span_seconds AS allocated_idle_gpus,
           coalesce(w_free, 0) / span_seconds AS unallocated_gpus,
           reported_sum / nullif(reported_w, 0) AS reported_util,
           effective_sum / nullif(effective_w, 0) AS effective_util,
           coalesce(usd, 0) AS cost_usd,
           coalesce(usd_busy, 0) AS busy_cost_usd,
           coalesce(usd_idle, 0) AS idle_cost_usd,
           coalesce(usd_free, 0) AS unallocated_cost_usd,
           coalesce(f.gpu_seconds, 0) / span_seconds AS fleet_gpus,
           coalesce(f.fleet_usd, 0) AS fleet_cost_usd,
           fleet_gpus - w / span_seconds AS not_sampled_gpus,
           fleet_cost_usd - cost_usd AS not_sampled_cost_usd
    FROM filled LEFT JOIN fleet f USING (scope, bucket_start)
)
SELECT * FROM final ORDER BY scope, bucket_start
