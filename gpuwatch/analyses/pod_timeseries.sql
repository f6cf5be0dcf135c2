-- One pod's GPU signals over time: reported vs effective utilization, tensor activity and memory held, per bucket.
-- params: $start, $end (timestamps, window [start, end)), $namespace, $pod (the pod), $bucket_seconds (seconds)
-- columns: bucket_start, reported_util, effective_util, tensor_active, fb_used_bytes, devices
-- reported = gpu_util, else gr_engine_active (MIG has no GPU_UTIL); effective = sm_active, never
-- guessed (NULL when the device has no profiling). Means across the pod's devices; memory is the max.
WITH pod_samples AS (
    SELECT * FROM stg_samples
    WHERE ts >= $start AND ts < $end AND namespace = $namespace AND pod = $pod
),
final AS (
    SELECT time_bucket(to_seconds($bucket_seconds), ts, $start::TIMESTAMP) AS bucket_start,
           exact_avg(reported) AS reported_util,
           exact_avg(effective) AS effective_util,
           exact_avg(tensor_active) AS tensor_active,
           max(fb_used_bytes) AS fb_used_bytes,
           count(DISTINCT device_key) AS devices
    FROM pod_samples
    GROUP BY bucket_start
)
SELECT * FROM final ORDER BY bucket_start
