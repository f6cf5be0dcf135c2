-- Busy without tensor or DRAM work: pods whose GPU looks busy (reported) while tensor and DRAM activity both stay near 0, where SM activity is not collected.
-- params: $start, $end (timestamps, window [start, end)), $false_reported_min (ratio), $quiet_below (ratio), $false_offender_share (ratio)
-- columns: namespace, pod, team, node, suspect_gpu_hours, judged_gpu_hours, suspect_share, mean_reported, mean_tensor_active, mean_dram_active, suspect_cost_usd, suspect
-- The partial evidence dcgm-exporter's default counters give (PIPE_TENSOR_ACTIVE and DRAM_ACTIVE are on,
-- SM_ACTIVE is not): a sample is suspect when reported >= $false_reported_min while tensor AND DRAM
-- activity are both below $quiet_below. Weaker than false utilization (an FP32/FP64 kernel that keeps
-- its data in cache uses neither pipe), so it is its own finding, never counted as false utilization
-- nor as savings: suspect_cost_usd is money at stake, to investigate. Judged only on samples without
-- SM activity (where SM activity is known, false_utilization judges) and with both tensor and DRAM
-- activity known; a pod with no such samples is not listed. GPU-hours weighted by GPU share.
WITH judged AS (
    SELECT namespace, pod, team, node, reported, tensor_active, dram_active,
           step_seconds * gpu_share / 3600.0 AS gpu_hours, step_seconds * usd_per_hour / 3600.0 AS usd,
           reported >= $false_reported_min AND tensor_active < $quiet_below AND dram_active < $quiet_below AS suspect
    FROM stg_series($start, $end)
    WHERE sm_active IS NULL AND tensor_active IS NOT NULL AND dram_active IS NOT NULL AND reported IS NOT NULL
      AND pod IS NOT NULL
),
per_pod AS (
    SELECT namespace, pod, any_value(team) AS team, min(node) AS node,
           sum(CASE WHEN suspect THEN gpu_hours ELSE 0 END) AS suspect_gpu_hours,
           sum(gpu_hours) AS judged_gpu_hours,
           avg(reported) AS mean_reported, avg(tensor_active) AS mean_tensor_active, avg(dram_active) AS mean_dram_active,
           sum(CASE WHEN suspect THEN usd END) AS suspect_cost_usd
    FROM judged
    GROUP BY namespace, pod
),
final AS (
    SELECT namespace, pod, team, node, suspect_gpu_hours, judged_gpu_hours,
           suspect_gpu_hours / nullif(judged_gpu_hours, 0) AS suspect_share,
           mean_reported, mean_tensor_active, mean_dram_active, coalesce(suspect_cost_usd, 0) AS suspect_cost_usd,
           coalesce(suspect_gpu_hours / nullif(judged_gpu_hours, 0) >= $false_offender_share, FALSE) AS suspect
    FROM per_pod
)
SELECT * FROM final ORDER BY suspect DESC, round(suspect_cost_usd, 6) DESC, namespace, pod
