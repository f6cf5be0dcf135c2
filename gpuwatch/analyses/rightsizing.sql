-- Rightsizing: whole-GPU pods that would fit a smaller MIG instance, and what that would save per month.
-- params: $start, $end (timestamps, window [start, end)), $mem_headroom (ratio), $compute_quantile (ratio), $min_observed_seconds (seconds), $hours_per_month (hours)
-- columns: namespace, pod, team, node, gpu_model, gpu_count, peak_fb_used_bytes, sm_active_quantile, profile, profile_id, current_usd_per_hour, target_usd_per_hour, monthly_savings_usd, observed_seconds
-- Candidate = a pod on whole, unshared GPUs with known SM activity and at least $min_observed_seconds
-- observed. Target = the smallest MIG profile (DESIGN §6 table, 7g excluded: no saving) whose memory
-- (its memory slices / 8 of the GPU) covers the pod's peak fb_used_bytes x (1 + $mem_headroom) and
-- whose compute (slices / 7) covers the $compute_quantile quantile of its SM activity.
-- Priced like chargeback: a "<model>/<profile>" price row, else the GPU price x compute slices / 7.
WITH series AS (
    SELECT * FROM stg_series($start, $end)
),
profiles AS (
    SELECT * FROM (VALUES (19, 1, 1), (15, 1, 2), (14, 2, 2), (9, 3, 4), (5, 4, 4))
        AS t(profile_id, compute_slices, memory_slices)
),
whole_gpus AS (
    SELECT node, gpu_uuid, gpu_model, fb_total_bytes, usd_per_hour FROM stg_devices WHERE mig_gi_id IS NULL
),
per_pod AS (
    SELECT s.namespace, s.pod, coalesce(any_value(s.team), s.namespace) AS team, any_value(s.node) AS node,
           any_value(g.gpu_model) AS gpu_model, max(g.fb_total_bytes) AS fb_total_bytes,
           max(s.fb_used_bytes) AS peak_fb_used_bytes,
           quantile_cont(s.effective, $compute_quantile) AS sm_active_quantile,
           max(s.gpu_share) AS gpu_share, count(DISTINCT s.device_key) AS devices,
           sum(s.step_seconds) / count(DISTINCT s.device_key) AS observed_seconds,
           sum(s.usd_per_hour) / count(*) * count(DISTINCT s.device_key) AS current_usd_per_hour
    FROM series s
    JOIN whole_gpus g ON g.node = s.node AND g.gpu_uuid = s.gpu_uuid AND s.mig_gi_id IS NULL
    GROUP BY s.namespace, s.pod
),
candidates AS (
    SELECT * FROM per_pod
    WHERE gpu_share >= 1.0 AND sm_active_quantile IS NOT NULL AND observed_seconds >= $min_observed_seconds
),
fits AS (
    SELECT c.*, p.profile_id, p.compute_slices, p.memory_slices,
           p.compute_slices || 'g.' || CAST(round(c.fb_total_bytes * p.memory_slices / 8 / 1073741824.0) AS INTEGER) || 'gb'
               AS profile,
           row_number() OVER (PARTITION BY c.namespace, c.pod ORDER BY p.compute_slices, p.memory_slices) AS rank
    FROM candidates c
    JOIN profiles p
      ON c.fb_total_bytes * p.memory_slices / 8.0 >= c.peak_fb_used_bytes * (1 + $mem_headroom)
     AND p.compute_slices / 7.0 >= c.sm_active_quantile
),
final AS (
    SELECT f.namespace, f.pod, f.team, f.node, f.gpu_model, a.gpu_count, f.peak_fb_used_bytes, f.sm_active_quantile,
           f.profile, f.profile_id, f.current_usd_per_hour,
           f.devices * coalesce(pp.usd_per_gpu_hour, mp.usd_per_gpu_hour * f.compute_slices / 7.0) AS target_usd_per_hour,
           (f.current_usd_per_hour - target_usd_per_hour) * $hours_per_month AS monthly_savings_usd,
           f.observed_seconds
    FROM fits f
    LEFT JOIN stg_pods a USING (namespace, pod)
    LEFT JOIN stg_prices mp ON mp.gpu_model = f.gpu_model
    LEFT JOIN stg_prices pp ON pp.gpu_model = f.gpu_model || '/' || f.profile
    WHERE f.rank = 1
)
SELECT * FROM final ORDER BY round(monthly_savings_usd, 6) DESC NULLS LAST, namespace, pod
