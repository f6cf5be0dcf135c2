-- Rightsizing: whole-GPU pods that would fit a smaller MIG instance, and what that would save per month.
-- params: $start, $end (timestamps, window [start, end)), $mem_headroom (ratio), $compute_quantile (ratio), $min_observed_seconds (seconds), $hours_per_month (hours)
-- columns: namespace, pod, team, node, gpu_model, gpu_count, peak_fb_used_bytes, sm_active_quantile, profile, profile_id, current_usd_per_hour, target_usd_per_hour, monthly_savings_usd, observed_seconds
-- Candidate = a pod on whole, unshared GPUs with known SM activity and at least $min_observed_seconds
-- observed. Target = the smallest MIG profile (docs/architecture.md#mig-placement table, 7g excluded: no saving) whose
-- instance memory covers the pod's peak fb_used_bytes x (1 + $mem_headroom) and whose compute covers the
-- $compute_quantile quantile of its SM activity: stg_mig_targets' memory and compute share, what the GPUs
-- reported, never a slice fraction (an H100's 1g.10gb holds 9984 MiB and 16 of 132 SMs, not 1/8 and
-- 1/7); a profile whose instance memory is unknown is not offered.
-- Priced like chargeback: a "<model>/<profile>" price row, else the GPU price x compute slices / 7.
-- Only GPUs of a MIG-capable model (mig_capable, from gpuwatch/mig.py) are candidates: an L40S or an
-- unknown model is never offered a MIG profile.
WITH profiles AS (
    -- candidate targets from ref_mig_profiles (gpuwatch/mig.py): smaller than the whole GPU, no
    -- media-extension profiles (a 1g+me holds the GPU's only media engines)
    SELECT profile_id, compute_slices, memory_slices FROM ref_mig_profiles
    WHERE mig_gpu_share(compute_slices) < 1 AND label NOT LIKE '%+me'
),
whole_streams AS (
    -- pods' streams on whole GPUs (not MIG instances), with the GPU's model and memory
    SELECT k.stream_id, k.namespace, k.pod, k.pod_id, k.team, k.node, k.device_key, k.gpu_share,
           k.usd_per_hour, k.step_seconds, g.gpu_model, g.fb_total_bytes
    FROM stg_streams k
    JOIN stg_devices g ON g.node = k.node AND g.gpu_uuid = k.gpu_uuid AND g.mig_gi_id IS NULL
    WHERE k.mig_gi_id IS NULL AND k.pod IS NOT NULL
),
per_stream AS (
    -- from the hourly rollup's stored hours where current (store/rollup.sql)
    SELECT stream_id, CAST(sum(series_n) AS BIGINT) AS samples, max(max_fb_used_bytes) AS peak_fb_used_bytes
    FROM stream_hours($start, $end, NULL, NULL, NULL)
    GROUP BY stream_id
    HAVING sum(series_n) > 0
),
per_pod AS (
    SELECT w.namespace, w.pod, any_value(w.pod_id) AS pod_id, coalesce(any_value(w.team), w.namespace) AS team,
           min(w.node) AS node, min(w.gpu_model) AS gpu_model, max(w.fb_total_bytes) AS fb_total_bytes,
           max(s.peak_fb_used_bytes) AS peak_fb_used_bytes,
           max(w.gpu_share) AS gpu_share, count(DISTINCT w.device_key) AS devices,
           exact_sum(s.samples * w.step_seconds) / count(DISTINCT w.device_key) AS observed_seconds,
           exact_sum(s.samples * w.usd_per_hour) / exact_sum(s.samples) * count(DISTINCT w.device_key) AS current_usd_per_hour
    FROM per_stream s
    JOIN whole_streams w USING (stream_id)
    GROUP BY w.namespace, w.pod
),
targets AS (
    -- per whole GPU kind the smaller profiles whose instance memory is known (stg_mig_targets)
    SELECT t.*, g.fb_total_bytes
    FROM (SELECT DISTINCT gpu_model, fb_total_bytes FROM per_pod) g
    JOIN stg_mig_targets t ON t.gpu_model = g.gpu_model AND t.gpu_fb_mib = g.fb_total_bytes // 1048576
    WHERE t.profile_id IN (SELECT profile_id FROM profiles)
),
eligible AS (
    -- only whole, unshared GPUs observed long enough, whose peak memory some profile holds, need their SM
    -- activity quantile (a scan of their rows): a pod no profile's memory fits has no target whatever it computes
    SELECT * FROM per_pod e
    WHERE gpu_share >= 1.0 AND observed_seconds >= $min_observed_seconds AND mig_capable(gpu_model)
      AND EXISTS (SELECT 1 FROM targets t
                  WHERE t.gpu_model = e.gpu_model AND t.fb_total_bytes = e.fb_total_bytes
                    AND t.memory_bytes >= e.peak_fb_used_bytes * (1 + $mem_headroom))
),
quantiles AS (
    SELECT w.pod_id, quantile_cont(r.effective, $compute_quantile) AS sm_active_quantile
    FROM stg_series_rows($start, $end) r
    JOIN whole_streams w USING (stream_id)
    WHERE w.pod_id IN (SELECT pod_id FROM eligible)
    GROUP BY w.pod_id
),
candidates AS (
    SELECT e.*, q.sm_active_quantile
    FROM eligible e
    JOIN quantiles q USING (pod_id)
    WHERE q.sm_active_quantile IS NOT NULL
),
fits AS (
    SELECT c.*, t.profile_id, t.compute_slices, t.memory_slices, t.profile,
           row_number() OVER (PARTITION BY c.namespace, c.pod ORDER BY t.compute_slices, t.memory_slices) AS rank
    FROM candidates c
    JOIN targets t
      ON t.gpu_model = c.gpu_model AND t.fb_total_bytes = c.fb_total_bytes
     AND t.memory_bytes >= c.peak_fb_used_bytes * (1 + $mem_headroom)
     AND t.compute_share >= c.sm_active_quantile
),
priced AS (
    SELECT f.*, f.devices * coalesce(price_on(f.node, model_key(f.gpu_model || '/' || f.profile)).usd,
                                     price_on(f.node, model_key(f.gpu_model)).usd * mig_gpu_share(f.compute_slices))
               AS target_usd_per_hour
    FROM fits f
    WHERE f.rank = 1
),
final AS (
    SELECT f.namespace, f.pod, f.team, f.node, f.gpu_model, a.gpu_count, f.peak_fb_used_bytes, f.sm_active_quantile,
           f.profile, f.profile_id, f.current_usd_per_hour, f.target_usd_per_hour,
           (f.current_usd_per_hour - f.target_usd_per_hour) * $hours_per_month AS monthly_savings_usd,
           f.observed_seconds
    FROM priced f
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(monthly_savings_usd, 6) DESC NULLS LAST, namespace, pod
