-- False utilization: pods that look busy (reported utilization) while the SMs do little (effective utilization).
-- params: $start, $end (timestamps, window [start, end)), $false_reported_min (ratio), $false_effective_below (ratio), $false_offender_share (ratio)
-- columns: namespace, pod, team, false_util_gpu_hours, false_share, mean_gap, false_util_cost_usd, gap_cost_usd, mean_reported, mean_effective, offender, node, judged_gpu_hours, effective_known, usd_per_hour
-- DESIGN §5: a sample is false when reported >= $false_reported_min and effective < $false_effective_below.
-- Only samples with a known effective value (SM_ACTIVE) are judged; without it a pod is not judged
-- (effective_known = false), never assumed fine or false. A pod is an offender when its false time
-- is at least $false_offender_share of its judged time. GPU-hours are weighted by GPU share.
WITH series AS (
    SELECT * FROM stg_series($start, $end)
),
judged AS (
    SELECT *, effective IS NOT NULL AS known,
           effective IS NOT NULL AND reported >= $false_reported_min AND effective < $false_effective_below AS is_false
    FROM series
),
per_pod AS (
    SELECT namespace, pod,
           coalesce(any_value(team), namespace) AS team,
           sum(step_seconds * gpu_share) FILTER (WHERE is_false) / 3600.0 AS false_util_gpu_hours,
           sum(step_seconds * gpu_share) FILTER (WHERE known) / 3600.0 AS judged_gpu_hours,
           sum(step_seconds) FILTER (WHERE is_false) / nullif(sum(step_seconds) FILTER (WHERE known), 0) AS false_share,
           avg(reported - effective) FILTER (WHERE is_false) AS mean_gap,
           sum(step_seconds * usd_per_hour) FILTER (WHERE is_false) / 3600.0 AS false_util_cost_usd,
           sum((reported - effective) * step_seconds * usd_per_hour) FILTER (WHERE is_false) / 3600.0 AS gap_cost_usd,
           avg(reported) FILTER (WHERE known) AS mean_reported,
           avg(effective) AS mean_effective,
           bool_or(known) AS effective_known,
           any_value(node) AS series_node
    FROM judged
    GROUP BY namespace, pod
),
final AS (
    SELECT p.namespace, p.pod, p.team,
           coalesce(p.false_util_gpu_hours, 0) AS false_util_gpu_hours, p.false_share, p.mean_gap,
           coalesce(p.false_util_cost_usd, 0) AS false_util_cost_usd, coalesce(p.gap_cost_usd, 0) AS gap_cost_usd,
           p.mean_reported, p.mean_effective,
           coalesce(p.false_share >= $false_offender_share, FALSE) AS offender,
           coalesce(a.node, p.series_node) AS node,
           coalesce(p.judged_gpu_hours, 0) AS judged_gpu_hours, p.effective_known, a.usd_per_hour
    FROM per_pod p
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(false_util_cost_usd, 6) DESC, round(false_util_gpu_hours, 6) DESC, namespace, pod
