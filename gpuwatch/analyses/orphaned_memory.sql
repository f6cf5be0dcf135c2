-- Orphaned memory: devices holding GPU memory while no pod is allocated to them, for how long, and what the unusable device costs.
-- params: $start, $end (timestamps, window [start, end)), $gap_steps (steps), $orphan_gpu_baseline_bytes (bytes), $orphan_mig_baseline_bytes (bytes), $orphan_min_seconds (seconds)
-- columns: node, gpu_uuid, mig_gi_id, gpu_model, since, until, seconds, max_fb_used_bytes, last_namespace, last_pod, usd_per_hour, usd_unusable, recommendation, cause, pids, pod_uid
-- docs/architecture.md#finding-semantics. A device is a whole GPU or a MIG instance (samples' node,
-- gpu_uuid, mig_gi_id). At each sample time it is:
--   held      when a sample row of it names a pod that has not ended (no pods-file row, or end_ts > ts):
--             the kubelet keeps terminated pods listed for a while, so a series still labelled with a
--             pod at or after that pod's end_ts is not an allocation; a whole GPU is also held while any
--             of its MIG instances is (its memory is theirs);
--   orphaned  when not held and fb_used_bytes (the largest row at that time) is above its empty
--             baseline: $orphan_mig_baseline_bytes for a MIG instance, $orphan_gpu_baseline_bytes for a
--             whole GPU (the driver's own context; equal to the baseline is empty);
--   unknown   when not held and fb_used_bytes is NULL: neither orphaned nor empty, and like a gap it
--             ends a run.
-- A run is consecutive orphaned samples of one device; a non-orphaned sample or an interval longer
-- than $gap_steps of the device's step (median interval between its sample times in the window; one
-- sample: 60 s) ends it. Each sample stands for one step: since = first sample, until = last sample
-- + one step, seconds = until - since. Runs of at least $orphan_min_seconds are reported.
-- last_namespace/last_pod: the pod most recently named on the device at or before the run's last
-- sample (an ended pod still listed included: it is the usual culprit), else the latest pod whose
-- pods-file device_ids list the whole GPU and that started before the run ended; NULL if none.
-- usd_unusable = the device's price (stg_devices: a MIG instance's own) x the run's hours; NULL when
-- the device is unpriced or not in the devices file (never $0). These rows have cause
-- 'no_pod_allocated'; pids = the compute processes (stg_processes, host PIDs) seen holding memory on the
-- device (or, for a whole GPU, any of its instances) during the run, NULL when the exporter saw none.
-- Second path, from stg_processes (NVML compute processes joined to pods through their cgroup): a
-- process holding memory (> 0) that belongs to a pod the pods file says has ended (in_pod 1, the
-- pod_uid's end_ts at or before the reading: cause 'process_of_ended_pod') or to no pod at all (in_pod
-- 0: 'host_process'); a process whose cgroup was unreadable (in_pod NULL) or whose pod the pods file
-- does not know is unknown, never orphaned. Runs per (device, pid) as above (its readings' own step);
-- readings inside a 'no_pod_allocated' run of the same device or GPU are that run's evidence, not a
-- second row. usd_unusable = the device's price x hours x the share of its memory the process holds
-- (an estimate: the device is still partly usable); NULL when unpriced or its size is unknown.
WITH streams AS (
    -- per stream: its device (dense integer ids: every later group and window is on integers), its
    -- empty baseline, and until when its pod holds it (no pod: never; an open allocation: always)
    SELECT k.stream_id, k.node, k.gpu_uuid, k.mig_gi_id,
           dense_rank() OVER (ORDER BY k.node, k.gpu_uuid, k.mig_gi_id NULLS FIRST) AS device_id,
           dense_rank() OVER (ORDER BY k.node, k.gpu_uuid) AS gpu_id,
           CASE WHEN k.mig_gi_id IS NULL THEN $orphan_gpu_baseline_bytes ELSE $orphan_mig_baseline_bytes END AS baseline,
           CASE WHEN k.pod IS NULL THEN TIMESTAMP '-infinity'
                ELSE coalesce(p.end_ts, TIMESTAMP 'infinity') END AS held_until
    FROM stg_streams k
    LEFT JOIN stg_pods p ON p.namespace = k.namespace AND p.pod = k.pod
),
suspect_gpus AS (
    -- GPUs that may have a sample no pod holds above its baseline: the only ones worth the scan below (a
    -- GPU let in without one is judged and yields nothing). From the hourly rollup where it is current
    -- (an hour of the stream that held more and has a row at or after its pod's end), from the rows
    -- elsewhere (the window's partial edge hours, or all of it when the rollup is not current)
    SELECT s.gpu_id
    FROM rollup_hours($start, $end, NULL, NULL, NULL) h
    JOIN streams s USING (stream_id)
    WHERE h.rows_max_fb_used_bytes > s.baseline AND h.rows_last_ts >= s.held_until
    UNION
    SELECT s.gpu_id
    FROM stg_sample_rows r
    JOIN streams s USING (stream_id)
    WHERE r.ts >= $start::TIMESTAMP AND r.ts < rollup_rows_before($start, $end, NULL, NULL, NULL)
      AND r.ts >= s.held_until AND r.fb_used_bytes > s.baseline
    UNION
    SELECT s.gpu_id
    FROM stg_sample_rows r
    JOIN streams s USING (stream_id)
    WHERE r.ts >= rollup_rows_after($start, $end, NULL, NULL, NULL) AND r.ts < $end::TIMESTAMP
      AND r.ts >= s.held_until AND r.fb_used_bytes > s.baseline
),
suspects AS (
    SELECT * FROM streams WHERE gpu_id IN (SELECT gpu_id FROM suspect_gpus)
),
sample_rows AS (
    SELECT s.device_id, s.gpu_id, s.mig_gi_id, s.baseline, r.ts, r.fb_used_bytes, r.ts < s.held_until AS held
    FROM stg_sample_rows r
    JOIN suspects s USING (stream_id)
    WHERE r.ts >= $start AND r.ts < $end
),
gpu_times AS (
    -- a whole GPU is held while a pod holds it or any of its MIG instances
    SELECT gpu_id, ts, bool_or(held) AS held FROM sample_rows GROUP BY gpu_id, ts
),
device_times AS (
    -- one row per (device, sample time): several streams (pods sharing it, a stale one) are one reading
    SELECT device_id, gpu_id, mig_gi_id, baseline, ts, bool_or(held) AS held, max(fb_used_bytes) AS fb_used_bytes
    FROM sample_rows GROUP BY device_id, gpu_id, mig_gi_id, baseline, ts
),
judged AS (
    SELECT d.device_id, d.ts, d.fb_used_bytes,
           coalesce(NOT (CASE WHEN d.mig_gi_id IS NULL THEN g.held ELSE d.held END)
                    AND d.fb_used_bytes > d.baseline, FALSE) AS orphaned,
           epoch(d.ts) - lag(epoch(d.ts)) OVER (PARTITION BY d.device_id ORDER BY d.ts) AS dt_seconds
    FROM device_times d
    JOIN gpu_times g ON g.gpu_id = d.gpu_id AND g.ts = d.ts
),
steps AS (
    SELECT device_id, coalesce(median(dt_seconds), 60.0) AS step_seconds FROM judged GROUP BY device_id
),
edged AS (
    -- a run starts at an orphaned sample after a non-orphaned one, a gap or the window's start
    SELECT j.*, s.step_seconds,
           j.orphaned AND (NOT coalesce(lag(j.orphaned) OVER (PARTITION BY j.device_id ORDER BY j.ts), FALSE)
                           OR coalesce(j.dt_seconds > $gap_steps * s.step_seconds, TRUE)) AS run_start
    FROM judged j
    JOIN steps s USING (device_id)
),
numbered AS (
    SELECT *, sum(run_start::INTEGER) OVER (PARTITION BY device_id ORDER BY ts) AS run_id FROM edged
),
runs AS (
    SELECT device_id, run_id, min(ts) AS since, max(ts) AS last_ts,
           max(ts) + to_seconds(any_value(step_seconds)) AS until,
           epoch(max(ts)) - epoch(min(ts)) + any_value(step_seconds) AS seconds,
           max(fb_used_bytes) AS max_fb_used_bytes
    FROM numbered
    WHERE orphaned
    GROUP BY device_id, run_id
    HAVING epoch(max(ts)) - epoch(min(ts)) + any_value(step_seconds) >= $orphan_min_seconds
),
devices AS (
    SELECT DISTINCT device_id, node, gpu_uuid, mig_gi_id FROM suspects
),
labelled AS (
    -- the pod named on a run's device at each time (pods sharing it: the first by namespace, pod)
    SELECT s.device_id, r.ts, min([k.namespace, k.pod]) AS holder
    FROM stg_sample_rows r
    JOIN suspects s USING (stream_id)
    JOIN stg_streams k USING (stream_id)
    WHERE k.pod IS NOT NULL AND r.ts < $end AND s.device_id IN (SELECT device_id FROM runs)
    GROUP BY s.device_id, r.ts
),
sampled_last AS (
    SELECT r.device_id, r.run_id, l.holder
    FROM runs r
    ASOF JOIN labelled l ON l.device_id = r.device_id AND l.ts <= r.last_ts
),
listed_last AS (
    -- a whole GPU's last allocation from the pods file, for runs whose samples name no pod
    SELECT r.device_id, r.run_id, arg_max([p.namespace, p.pod], p.start_ts) AS holder
    FROM runs r
    JOIN devices d USING (device_id)
    JOIN stg_pods p
      ON d.mig_gi_id IS NULL AND coalesce(p.node = d.node, TRUE) AND p.start_ts <= r.last_ts
     AND list_contains(list_transform(string_split(p.device_ids, ','), lambda x: trim(x)), d.gpu_uuid)
    GROUP BY r.device_id, r.run_id
),
device_runs AS (
    SELECT v.node, v.gpu_uuid, v.mig_gi_id, r.* FROM runs r JOIN devices v USING (device_id)
),
pod_ends AS (
    -- per pod UID: its name and end (NULL while any row of it is open)
    SELECT pod_uid, any_value(namespace) AS namespace, any_value(pod) AS pod,
           CASE WHEN bool_and(end_ts IS NOT NULL) THEN max(end_ts) END AS end_ts
    FROM stg_pods WHERE pod_uid IS NOT NULL GROUP BY pod_uid
),
process_rows AS (
    SELECT x.*, e.namespace, e.pod,
           CASE WHEN x.in_pod = 0 THEN 'host_process'
                WHEN x.in_pod = 1 AND x.ts >= e.end_ts THEN 'process_of_ended_pod' END AS cause,
           dense_rank() OVER (ORDER BY x.node, x.gpu_uuid, x.mig_gi_id NULLS FIRST, x.pid) AS series_id
    FROM stg_processes x
    LEFT JOIN pod_ends e USING (pod_uid)
    WHERE x.ts >= $start AND x.ts < $end AND x.fb_used_bytes > 0
),
process_judged AS (
    SELECT p.*, p.cause IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM device_runs r
               WHERE r.node = p.node AND r.gpu_uuid = p.gpu_uuid
                 AND (r.mig_gi_id IS NULL OR r.mig_gi_id IS NOT DISTINCT FROM p.mig_gi_id)
                 AND p.ts >= r.since AND p.ts < r.until) AS orphaned,
           epoch(p.ts) - lag(epoch(p.ts)) OVER (PARTITION BY p.series_id ORDER BY p.ts) AS dt_seconds
    FROM process_rows p
),
process_steps AS (
    SELECT series_id, coalesce(median(dt_seconds), 60.0) AS step_seconds FROM process_judged GROUP BY series_id
),
process_edged AS (
    SELECT j.*, s.step_seconds,
           j.orphaned AND (NOT coalesce(lag(j.orphaned) OVER (PARTITION BY j.series_id ORDER BY j.ts), FALSE)
                           OR lag(j.cause) OVER (PARTITION BY j.series_id ORDER BY j.ts) IS DISTINCT FROM j.cause
                           OR coalesce(j.dt_seconds > $gap_steps * s.step_seconds, TRUE)) AS run_start
    FROM process_judged j JOIN process_steps s USING (series_id)
),
process_runs AS (
    SELECT node, gpu_uuid, mig_gi_id, pid, any_value(pod_uid) AS pod_uid, any_value(namespace) AS namespace,
           any_value(pod) AS pod, any_value(cause) AS cause, min(ts) AS since,
           max(ts) + to_seconds(any_value(step_seconds)) AS until,
           epoch(max(ts)) - epoch(min(ts)) + any_value(step_seconds) AS seconds,
           max(fb_used_bytes) AS max_fb_used_bytes
    FROM (SELECT *, sum(run_start::INTEGER) OVER (PARTITION BY series_id ORDER BY ts) AS run_id FROM process_edged)
    WHERE orphaned
    GROUP BY node, gpu_uuid, mig_gi_id, pid, series_id, run_id
    HAVING epoch(max(ts)) - epoch(min(ts)) + any_value(step_seconds) >= $orphan_min_seconds
),
run_pids AS (
    SELECT r.device_id, r.run_id, string_agg(DISTINCT CAST(x.pid AS VARCHAR), ',' ORDER BY CAST(x.pid AS VARCHAR)) AS pids
    FROM device_runs r
    JOIN stg_processes x
      ON x.node = r.node AND x.gpu_uuid = r.gpu_uuid AND (r.mig_gi_id IS NULL OR x.mig_gi_id IS NOT DISTINCT FROM r.mig_gi_id)
     AND x.ts >= r.since AND x.ts < r.until AND x.fb_used_bytes > 0
    GROUP BY r.device_id, r.run_id
),
device_final AS (
    SELECT v.node, v.gpu_uuid, v.mig_gi_id, coalesce(d.gpu_model, g.gpu_model) AS gpu_model, r.since, r.until,
           r.seconds, r.max_fb_used_bytes,
           coalesce(s.holder, l.holder)[1] AS last_namespace, coalesce(s.holder, l.holder)[2] AS last_pod,
           d.usd_per_hour, d.usd_per_hour * r.seconds / 3600.0 AS usd_unusable,
           'drain the node and reset the GPU (memory held by no pod)' AS recommendation,
           'no_pod_allocated' AS cause, x.pids, CAST(NULL AS VARCHAR) AS pod_uid
    FROM runs r
    JOIN devices v USING (device_id)
    LEFT JOIN stg_devices d
      ON d.node = v.node AND d.gpu_uuid = v.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM v.mig_gi_id
    LEFT JOIN stg_gpus g ON g.node = v.node AND g.gpu_uuid = v.gpu_uuid
    LEFT JOIN sampled_last s ON s.device_id = r.device_id AND s.run_id = r.run_id
    LEFT JOIN listed_last l ON l.device_id = r.device_id AND l.run_id = r.run_id
    LEFT JOIN run_pids x ON x.device_id = r.device_id AND x.run_id = r.run_id
),
process_final AS (
    SELECT p.node, p.gpu_uuid, p.mig_gi_id, coalesce(d.gpu_model, g.gpu_model) AS gpu_model, p.since, p.until,
           p.seconds, p.max_fb_used_bytes, p.namespace AS last_namespace, p.pod AS last_pod, d.usd_per_hour,
           d.usd_per_hour * p.seconds / 3600.0 * least(p.max_fb_used_bytes / nullif(d.fb_total_bytes, 0), 1.0)
               AS usd_unusable,
           CASE p.cause WHEN 'host_process'
                THEN 'find host PID ' || p.pid || ' (in no pod) holding GPU memory; stop it or drain and reset the GPU'
                ELSE 'kill PID ' || p.pid || ' (its pod ended) or drain the node and reset the GPU' END AS recommendation,
           p.cause, CAST(p.pid AS VARCHAR) AS pids, p.pod_uid
    FROM process_runs p
    LEFT JOIN stg_devices d
      ON d.node = p.node AND d.gpu_uuid = p.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM p.mig_gi_id
    LEFT JOIN stg_gpus g ON g.node = p.node AND g.gpu_uuid = p.gpu_uuid
),
final AS (
    SELECT * FROM device_final UNION ALL SELECT * FROM process_final
)
SELECT * FROM final ORDER BY round(usd_unusable, 6) DESC NULLS LAST, seconds DESC, node, gpu_uuid, mig_gi_id, since, pids
