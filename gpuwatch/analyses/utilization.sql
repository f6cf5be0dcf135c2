-- Utilization per pod: GPU-hours held and what the GPUs did with them (reported vs effective).
-- params: $start, $end (timestamps, window [start, end))
-- columns: namespace, pod, team, gpu_hours, mean_gpu_util, mean_gr_engine_active, mean_sm_active, mean_tensor_active, max_fb_used_bytes, mean_reported, mean_effective, node, gpu_count, cost_usd
-- Means are over the pod's observed samples (series, DESIGN §5); a mean is NULL (unknown, never 0)
-- when the field was never reported (e.g. SM activity without DCGM profiling, GPU_UTIL on MIG).
-- gpu_hours are observed samples x step x GPU share (MIG slices / 7, time-sliced gpu_count).
WITH series AS (
    SELECT * FROM stg_series($start, $end)
),
per_pod AS (
    SELECT namespace, pod,
           coalesce(any_value(team), namespace) AS team,
           sum(step_seconds * gpu_share) / 3600.0 AS gpu_hours,
           avg(gpu_util) AS mean_gpu_util,
           avg(gr_engine_active) AS mean_gr_engine_active,
           avg(sm_active) AS mean_sm_active,
           avg(tensor_active) AS mean_tensor_active,
           max(fb_used_bytes) AS max_fb_used_bytes,
           avg(reported) AS mean_reported,
           avg(effective) AS mean_effective,
           sum(step_seconds * usd_per_hour) / 3600.0 AS cost_usd,
           any_value(node) AS series_node
    FROM series
    GROUP BY namespace, pod
),
final AS (
    SELECT p.namespace, p.pod, p.team, p.gpu_hours, p.mean_gpu_util, p.mean_gr_engine_active, p.mean_sm_active,
           p.mean_tensor_active, p.max_fb_used_bytes, p.mean_reported, p.mean_effective,
           coalesce(a.node, p.series_node) AS node, a.gpu_count, p.cost_usd
    FROM per_pod p
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(gpu_hours, 6) DESC, namespace, pod
