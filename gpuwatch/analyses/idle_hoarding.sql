-- Idle hoarding: allocated pods whose GPUs sit idle, for how long, holding what memory, at what cost.
-- params: $start, $end (timestamps, window [start, end)), $idle_below (ratio), $gap_steps (steps), $min_idle_run_seconds (seconds), $hoarder_idle_share (ratio), $min_observed_seconds (seconds)
-- columns: namespace, pod, team, idle_gpu_hours, idle_share, longest_idle_seconds, max_fb_used_bytes_idle, idle_cost_usd, hoarder, node, owner_kind, owner_name, priority_class, idle_since, reclaimable_now, usd_per_hour, gpu_count, device_ids, observed_gpu_hours, observed_seconds, observed_cost_usd, end_ts, held_at_end
-- docs/architecture.md#finding-semantics. Each sample stands for one series step of its device; GPU-hours are weighted by the
-- sample's GPU share (MIG slices / 7, a time-sliced pod's gpu_count) so idle cost reconciles with
-- chargeback. A gap > $gap_steps steps is unknown time: neither idle nor busy, and it ends a run.
-- Runs are found from each sample's neighbours (staging keeps them): a run starts at an idle sample
-- after a busy one or a gap, ends at an idle sample before one, and starts pair with ends (ASOF).
WITH judged AS NOT MATERIALIZED (
    SELECT stream_id, ts, fb_used_bytes, dt_seconds, next_dt_seconds,
           is_idle(reported, effective, $idle_below) AS idle,
           coalesce(is_idle(prev_reported, prev_effective, $idle_below), FALSE) AS prev_idle,
           coalesce(is_idle(next_reported, next_effective, $idle_below), FALSE) AS next_idle
    FROM stg_series_rows($start, $end)
),
classified AS (
    -- idle samples with their series' step; a neighbour outside the window counts as a gap, so runs
    -- are cut at the window's edges
    SELECT j.stream_id, j.ts, j.prev_idle, j.next_idle, k.step_seconds,
           coalesce(j.dt_seconds > $gap_steps * k.step_seconds
                    OR epoch(j.ts) - j.dt_seconds < epoch($start::TIMESTAMP), TRUE) AS gap_before,
           coalesce(j.next_dt_seconds > $gap_steps * k.step_seconds
                    OR epoch(j.ts) + j.next_dt_seconds >= epoch($end::TIMESTAMP), TRUE) AS gap_after
    FROM judged j
    JOIN stg_streams k USING (stream_id)
    WHERE j.idle
),
edges AS MATERIALIZED (
    -- the few samples where a run starts or ends (one scan; the runs are built from these alone)
    SELECT stream_id, ts, step_seconds,
           NOT prev_idle OR gap_before AS is_start, NOT next_idle OR gap_after AS is_end
    FROM classified
    WHERE NOT prev_idle OR gap_before OR NOT next_idle OR gap_after
),
run_starts AS (
    SELECT stream_id, ts AS run_start FROM edges WHERE is_start
),
run_ends AS (
    SELECT stream_id, ts AS run_end, step_seconds FROM edges WHERE is_end
),
runs AS MATERIALIZED (
    SELECT s.stream_id, s.run_start, e.run_end,
           epoch(e.run_end) - epoch(s.run_start) + e.step_seconds AS run_seconds
    FROM run_starts s
    ASOF JOIN run_ends e ON e.stream_id = s.stream_id AND e.run_end >= s.run_start
),
per_stream AS MATERIALIZED (
    -- counted by the integer stream id, from the hourly rollup where current (store/rollup.sql: the
    -- same counts); the stream's constants (team, share, price, step) join after
    SELECT stream_id, CAST(sum(series_idle_n) AS BIGINT) AS idle_n, CAST(sum(series_busy_n) AS BIGINT) AS busy_n,
           max(series_idle_max_fb) AS max_fb_idle, max(series_last_ts) AS series_last_ts
    FROM stream_hours($start, $end, $idle_below, NULL, NULL)
    GROUP BY stream_id
    HAVING sum(series_n) > 0
),
per_series AS (
    SELECT s.stream_id, k.namespace, k.pod, k.node, k.team, k.gpu_share, k.usd_per_hour, k.step_seconds,
           s.idle_n * k.step_seconds AS idle_seconds, s.busy_n * k.step_seconds AS busy_seconds,
           s.max_fb_idle, s.series_last_ts
    FROM per_stream s
    JOIN stg_streams k USING (stream_id)
),
window_last AS (
    SELECT max(series_last_ts) AS last_ts FROM per_series
),
trailing_runs AS (
    -- the run that ends at its series' last sample, if any
    SELECT r.stream_id, r.run_start, r.run_seconds
    FROM runs r
    JOIN per_series s USING (stream_id)
    WHERE r.run_end = s.series_last_ts
),
held AS (
    -- held at the end: the series' last sample is within one step of the window's latest sample
    SELECT s.*, epoch((SELECT last_ts FROM window_last)) - epoch(s.series_last_ts) <= s.step_seconds AS held_at_end
    FROM per_series s
),
judged_series AS (
    -- reclaimable now: held at the end, and an idle run of at least $min_idle_run_seconds ends at the
    -- series' last sample (gpuwatch/idle_bridge.py: the steps from idle time to a monthly saving)
    SELECT s.*, t.run_start AS trailing_start,
           coalesce(t.run_seconds >= $min_idle_run_seconds AND s.held_at_end, FALSE) AS reclaimable
    FROM held s
    LEFT JOIN trailing_runs t USING (stream_id)
),
longest AS (
    SELECT k.namespace, k.pod, max(r.run_seconds) AS longest_idle_seconds
    FROM runs r JOIN stg_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod
),
per_pod AS (
    SELECT namespace, pod,
           coalesce(any_value(team), namespace) AS team,
           exact_sum(idle_seconds * gpu_share) / 3600.0 AS idle_gpu_hours,
           exact_sum((idle_seconds + busy_seconds) * gpu_share) / 3600.0 AS observed_gpu_hours,
           exact_sum(idle_seconds) / nullif(exact_sum(idle_seconds + busy_seconds), 0) AS idle_share,
           max(idle_seconds + busy_seconds) AS observed_seconds,
           max(max_fb_idle) AS max_fb_used_bytes_idle,
           usd_cents(exact_sum(idle_seconds * usd_per_hour) / 3600.0) AS idle_cost_usd,
           usd_cents(exact_sum((idle_seconds + busy_seconds) * usd_per_hour) / 3600.0) AS observed_cost_usd,
           -- a multi-GPU pod is reclaimable only when every one of its devices is
           bool_and(reclaimable) AS reclaimable_now,
           coalesce(bool_and(held_at_end), FALSE) AS held_at_end,
           max(trailing_start) AS last_idle_start,
           exact_sum(usd_per_hour) AS series_usd_per_hour,
           min(node) AS series_node
    FROM judged_series
    GROUP BY namespace, pod
),
final AS (
    SELECT p.namespace, p.pod, p.team, p.idle_gpu_hours, p.idle_share,
           coalesce(l.longest_idle_seconds, 0) AS longest_idle_seconds,
           p.max_fb_used_bytes_idle, p.idle_cost_usd,
           (p.idle_share >= $hoarder_idle_share AND p.observed_seconds >= $min_observed_seconds)
               OR p.reclaimable_now AS hoarder,
           coalesce(a.node, p.series_node) AS node, a.owner_kind, a.owner_name, a.priority_class,
           CASE WHEN p.reclaimable_now THEN p.last_idle_start END AS idle_since,
           p.reclaimable_now,
           coalesce(a.usd_per_hour, p.series_usd_per_hour) AS usd_per_hour,
           a.gpu_count, a.device_ids,
           p.observed_gpu_hours, p.observed_seconds, p.observed_cost_usd, a.end_ts, p.held_at_end
    FROM per_pod p
    LEFT JOIN longest l USING (namespace, pod)
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(idle_cost_usd, 6) DESC NULLS LAST, round(idle_gpu_hours, 6) DESC, namespace, pod
