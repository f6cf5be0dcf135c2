-- Utilization per pod: GPU-hours held and what the GPUs did with them (reported vs effective).
-- params: $start, $end (timestamps, window [start, end))
-- columns: namespace, pod, team, gpu_hours, mean_gpu_util, mean_gr_engine_active, mean_sm_active, mean_tensor_active, max_fb_used_bytes, mean_reported, mean_effective, node, gpu_count, cost_usd
-- Means are over the pod's observed samples (series, docs/architecture.md#finding-semantics); a mean is NULL (unknown, never 0)
-- when the field was never reported (e.g. SM activity without DCGM profiling, GPU_UTIL on MIG).
-- gpu_hours are observed samples x step x GPU share (MIG slices / 7, time-sliced gpu_count).
WITH per_stream AS (
    -- aggregate by the integer stream id first (stg_streams holds the per-stream constants), from the
    -- hourly rollup's stored hours where current (store/rollup.sql: the same sums, bit for bit)
    SELECT stream_id, CAST(sum(series_n) AS BIGINT) AS samples,
           exact_total(gpu_util_part) AS gpu_util_sum, CAST(sum(gpu_util_n) AS BIGINT) AS gpu_util_n,
           exact_total(gr_part) AS gr_sum, CAST(sum(gr_n) AS BIGINT) AS gr_n,
           exact_total(sm_part) AS sm_sum, CAST(sum(sm_n) AS BIGINT) AS sm_n,
           exact_total(tensor_part) AS tensor_sum, CAST(sum(tensor_n) AS BIGINT) AS tensor_n,
           max(max_fb_used_bytes) AS max_fb_used_bytes,
           exact_total(series_reported_part) AS reported_sum, CAST(sum(series_reported_n) AS BIGINT) AS reported_n,
           exact_total(series_effective_part) AS effective_sum, CAST(sum(series_effective_n) AS BIGINT) AS effective_n
    FROM stream_hours($start, $end, NULL, NULL, NULL)
    GROUP BY stream_id
    HAVING sum(series_n) > 0
),
per_pod AS (
    SELECT k.namespace, k.pod,
           coalesce(any_value(k.team), k.namespace) AS team,
           exact_sum(s.samples * k.step_seconds * k.gpu_share) / 3600.0 AS gpu_hours,
           exact_sum(s.gpu_util_sum) / nullif(exact_sum(s.gpu_util_n), 0) AS mean_gpu_util,
           exact_sum(s.gr_sum) / nullif(exact_sum(s.gr_n), 0) AS mean_gr_engine_active,
           exact_sum(s.sm_sum) / nullif(exact_sum(s.sm_n), 0) AS mean_sm_active,
           exact_sum(s.tensor_sum) / nullif(exact_sum(s.tensor_n), 0) AS mean_tensor_active,
           max(s.max_fb_used_bytes) AS max_fb_used_bytes,
           exact_sum(s.reported_sum) / nullif(exact_sum(s.reported_n), 0) AS mean_reported,
           exact_sum(s.effective_sum) / nullif(exact_sum(s.effective_n), 0) AS mean_effective,
           usd_cents(exact_sum(s.samples * k.step_seconds * k.usd_per_hour) / 3600.0) AS cost_usd,
           min(k.node) AS series_node
    FROM per_stream s
    JOIN stg_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod
),
final AS (
    SELECT p.namespace, p.pod, p.team, p.gpu_hours, p.mean_gpu_util, p.mean_gr_engine_active, p.mean_sm_active,
           p.mean_tensor_active, p.max_fb_used_bytes, p.mean_reported, p.mean_effective,
           coalesce(a.node, p.series_node) AS node, a.gpu_count, p.cost_usd
    FROM per_pod p
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(gpu_hours, 6) DESC, namespace, pod
