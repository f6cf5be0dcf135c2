-- False utilization: pods that look busy (reported utilization) while the SMs do little (effective utilization).
-- params: $start, $end (timestamps, window [start, end)), $false_reported_min (ratio), $false_effective_below (ratio), $false_offender_share (ratio)
-- columns: namespace, pod, team, false_util_gpu_hours, false_share, mean_gap, false_util_cost_usd, gap_cost_usd, mean_reported, mean_effective, offender, node, judged_gpu_hours, effective_known, usd_per_hour
-- docs/architecture.md#finding-semantics: a sample is false when reported >= $false_reported_min and effective < $false_effective_below.
-- Only samples with a known effective value (SM_ACTIVE) are judged; without it a pod is not judged
-- (effective_known = false), never assumed fine or false. A pod is an offender when its false time
-- is at least $false_offender_share of its judged time. GPU-hours are weighted by GPU share.
WITH per_stream AS (
    -- aggregate by the integer stream id first (stg_streams holds the per-stream constants), from the
    -- hourly rollup's stored hours where current (store/rollup.sql: the same sums, bit for bit)
    SELECT stream_id,
           CAST(sum(series_false_n) AS BIGINT) AS false_n,
           CAST(sum(series_effective_n) AS BIGINT) AS known_n,
           exact_total(series_false_gap_part) AS gap_sum,
           exact_total(series_known_reported_part) AS reported_known_sum,
           exact_total(series_effective_part) AS effective_sum
    FROM stream_hours($start, $end, NULL, $false_reported_min, $false_effective_below)
    GROUP BY stream_id
    HAVING sum(series_n) > 0
),
per_pod AS (
    SELECT k.namespace, k.pod,
           coalesce(any_value(k.team), k.namespace) AS team,
           exact_sum(s.false_n * k.step_seconds * k.gpu_share) / 3600.0 AS false_util_gpu_hours,
           exact_sum(s.known_n * k.step_seconds * k.gpu_share) / 3600.0 AS judged_gpu_hours,
           exact_sum(s.false_n * k.step_seconds) / nullif(exact_sum(s.known_n * k.step_seconds), 0) AS false_share,
           exact_sum(s.gap_sum) / nullif(exact_sum(s.false_n), 0) AS mean_gap,
           usd_cents(exact_sum(s.false_n * k.step_seconds * k.usd_per_hour) / 3600.0) AS false_util_cost_usd,
           usd_cents(exact_sum(s.gap_sum * k.step_seconds * k.usd_per_hour) / 3600.0) AS gap_cost_usd,
           exact_sum(s.reported_known_sum) / nullif(exact_sum(s.known_n), 0) AS mean_reported,
           -- effective is known exactly on the known rows
           exact_sum(s.effective_sum) / nullif(exact_sum(s.known_n), 0) AS mean_effective,
           sum(s.known_n) > 0 AS effective_known,
           min(k.node) AS series_node
    FROM per_stream s
    JOIN stg_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod
),
final AS (
    SELECT p.namespace, p.pod, p.team,
           coalesce(p.false_util_gpu_hours, 0) AS false_util_gpu_hours, p.false_share, p.mean_gap,
           -- no false time costs nothing; false time on an unpriced GPU costs an unknown amount (NULL, never $0)
           CASE WHEN coalesce(p.false_util_gpu_hours, 0) = 0 THEN 0 ELSE p.false_util_cost_usd END AS false_util_cost_usd,
           CASE WHEN coalesce(p.false_util_gpu_hours, 0) = 0 THEN 0 ELSE p.gap_cost_usd END AS gap_cost_usd,
           p.mean_reported, p.mean_effective,
           coalesce(p.false_share >= $false_offender_share, FALSE) AS offender,
           coalesce(a.node, p.series_node) AS node,
           coalesce(p.judged_gpu_hours, 0) AS judged_gpu_hours, p.effective_known, a.usd_per_hour
    FROM per_pod p
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(false_util_cost_usd, 6) DESC, round(false_util_gpu_hours, 6) DESC, namespace, pod
