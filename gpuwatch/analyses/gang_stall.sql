-- Gang stalls: jobs holding idle GPUs while sibling pods wait Pending (partial allocation), and stragglers slowing synchronous jobs.
-- params: $start, $end (timestamps, window [start, end)), $idle_below (ratio), $gap_steps (steps), $gang_min_seconds (seconds), $straggler_gap (ratio), $straggler_min_seconds (seconds)
-- columns: kind, namespace, job, since, until, seconds, pods_holding, gpus_held, pods_pending, gpus_pending, idle_gpu_hours, usd_held_idle, pod, node, gpu_uuid, mig_gi_id, sm_active, job_median_sm_active, recommendation
-- docs/architecture.md#finding-semantics. A job is (namespace, stg_pod_status.job): a pod's latest stated
-- job; pods without one are never judged. An open state (no next row, an allocation without end) holds
-- until the data's last sample or status row, never past $end.
-- kind 'partial_allocation': a stall is time when the job has at least one holder (a pod of the job
-- allocated in stg_pods), at least one sibling Pending (a stg_pod_status Pending state, and not
-- allocated then), and every holder's devices (its streams with samples in the window; a holder with
-- none is unknown, never idle) sit idle. A device is idle from an idle sample (is_idle) to the next
-- sample when that one is idle too and no gap (> $gap_steps steps) lies between, else for one step;
-- unknown time is never idle. One row per maximal stall of at least $gang_min_seconds: the distinct
-- pods holding and pending over it, gpus_held = their gpu_count, gpus_pending = their gpu_request (NULL
-- when unknown), idle_gpu_hours = held GPU equivalents x stalled time, usd_held_idle = x the holders'
-- price (NULL when one is unpriced). pod, node, gpu_uuid, mig_gi_id, sm_active and job_median_sm_active
-- are NULL on these rows.
-- kind 'straggler': a judged job is one with no pod Pending; its devices' samples are bucketed into
-- steps (the job's longest series step, from $start). A bucket is judged when at least two devices
-- have samples in it and every one has known SM activity (one unknown: not judged; nothing from
-- applications, infrastructure signals only). A device lags in a bucket when its mean SM activity is at
-- least $straggler_gap below the median of the job's devices while every other device is busy (not
-- is_idle); one row per run of consecutive lagging buckets lasting at least $straggler_min_seconds,
-- with the device (pod, node, gpu_uuid, mig_gi_id), its mean SM activity and the job's mean median over
-- the run, the job's pods and GPUs in those buckets. The job's slowdown is not measured from
-- infrastructure signals: idle_gpu_hours and usd_held_idle are NULL, pods_pending and gpus_pending 0.
WITH pod_jobs AS (
    SELECT namespace, pod, arg_max(job, ts) AS job FROM stg_pod_status WHERE job IS NOT NULL GROUP BY namespace, pod
),
data_end AS (
    SELECT least($end::TIMESTAMP, greatest((SELECT max(ts) FROM stg_sample_rows), (SELECT max(ts) FROM stg_pod_status)))
               AS ts
),
pending AS MATERIALIZED (
    SELECT s.namespace, j.job, s.pod, s.gpu_request,
           greatest(s.ts, $start::TIMESTAMP) AS t0,
           least(coalesce(s.until_ts, (SELECT ts FROM data_end)), $end::TIMESTAMP) AS t1
    FROM stg_pod_status s
    JOIN pod_jobs j USING (namespace, pod)
    WHERE lower(s.phase) = 'pending'
      AND greatest(s.ts, $start::TIMESTAMP) < least(coalesce(s.until_ts, (SELECT ts FROM data_end)), $end::TIMESTAMP)
),
holders AS MATERIALIZED (
    SELECT p.namespace, j.job, p.pod, p.gpu_count, p.gpu_equivalents, p.usd_per_hour,
           greatest(coalesce(p.start_ts, $start::TIMESTAMP), $start::TIMESTAMP) AS t0,
           least(coalesce(p.end_ts, (SELECT ts FROM data_end)), $end::TIMESTAMP) AS t1
    FROM stg_pods p
    JOIN pod_jobs j USING (namespace, pod)
),
gang_jobs AS MATERIALIZED (
    -- only jobs with a holder and a Pending sibling can stall
    SELECT DISTINCT namespace, job FROM holders WHERE t0 < t1
    INTERSECT
    SELECT DISTINCT namespace, job FROM pending
),
holder_streams AS MATERIALIZED (
    SELECT k.stream_id, k.namespace, k.pod, k.step_seconds
    FROM stg_streams k
    JOIN holders h USING (namespace, pod)
    JOIN gang_jobs g USING (namespace, job)
    -- streams with series rows in the window (the hourly rollup's counts where current)
    WHERE k.stream_id IN (SELECT stream_id FROM stream_hours($start, $end, NULL, NULL, NULL) WHERE series_n > 0)
),
holder_devices AS (
    SELECT namespace, pod, count(*) AS devices FROM holder_streams GROUP BY namespace, pod
),
idle_spans AS (
    SELECT r.stream_id, r.ts AS t0,
           r.ts + to_seconds(CASE WHEN coalesce(is_idle(r.next_reported, r.next_effective, $idle_below), FALSE)
                                       AND r.next_dt_seconds <= $gap_steps * k.step_seconds
                                  THEN r.next_dt_seconds
                                  ELSE least(k.step_seconds, coalesce(r.next_dt_seconds, k.step_seconds)) END) AS t1
    FROM stg_series_rows($start, $end) r
    JOIN holder_streams k USING (stream_id)
    WHERE is_idle(r.reported, r.effective, $idle_below)
),
idle_marked AS (
    SELECT *, coalesce(t0 > lag(t1) OVER (PARTITION BY stream_id ORDER BY t0), TRUE) AS run_start FROM idle_spans
),
idle_numbered AS (
    SELECT *, sum(run_start::INTEGER) OVER (PARTITION BY stream_id ORDER BY t0) AS run FROM idle_marked
),
idle_runs AS MATERIALIZED (
    -- contiguous idle time per holder device
    SELECT k.namespace, k.pod, i.stream_id, min(i.t0) AS t0, least(max(i.t1), $end::TIMESTAMP) AS t1
    FROM idle_numbered i
    JOIN holder_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod, i.stream_id, i.run
),
points AS (
    SELECT namespace, job, t0 AS t FROM pending UNION SELECT namespace, job, t1 FROM pending
    UNION SELECT namespace, job, t0 FROM holders UNION SELECT namespace, job, t1 FROM holders
    UNION SELECT h.namespace, h.job, i.t0 FROM idle_runs i JOIN holders h USING (namespace, pod)
    UNION SELECT h.namespace, h.job, i.t1 FROM idle_runs i JOIN holders h USING (namespace, pod)
),
pieces AS MATERIALIZED (
    -- the job's timeline cut at every change: within a piece nothing changes
    SELECT * FROM (
        SELECT p.namespace, p.job, p.t AS t0, lead(p.t) OVER (PARTITION BY p.namespace, p.job ORDER BY p.t) AS t1
        FROM points p
        JOIN gang_jobs g USING (namespace, job)
    ) WHERE t1 IS NOT NULL
),
piece_holders AS MATERIALIZED (
    SELECT c.namespace, c.job, c.t0, c.t1, h.pod, any_value(h.gpu_count) AS gpu_count,
           any_value(h.gpu_equivalents) AS gpu_equivalents, any_value(h.usd_per_hour) AS usd_per_hour,
           coalesce(any_value(n.devices), 0) AS devices, count(DISTINCT i.stream_id) AS idle_devices
    FROM pieces c
    JOIN holders h ON h.namespace = c.namespace AND h.job = c.job AND h.t0 <= c.t0 AND h.t1 > c.t0
    LEFT JOIN holder_devices n ON n.namespace = h.namespace AND n.pod = h.pod
    LEFT JOIN idle_runs i ON i.namespace = h.namespace AND i.pod = h.pod AND i.t0 <= c.t0 AND i.t1 > c.t0
    GROUP BY c.namespace, c.job, c.t0, c.t1, h.pod
),
piece_pending AS MATERIALIZED (
    SELECT DISTINCT c.namespace, c.job, c.t0, p.pod
    FROM pieces c
    JOIN pending p ON p.namespace = c.namespace AND p.job = c.job AND p.t0 <= c.t0 AND p.t1 > c.t0
    WHERE NOT EXISTS (SELECT 1 FROM holders h
                      WHERE h.namespace = p.namespace AND h.pod = p.pod AND h.t0 <= c.t0 AND h.t1 > c.t0)
),
stalled AS (
    SELECT namespace, job, t0, t1,
           exact_sum(gpu_equivalents) AS gpu_equivalents,
           CASE WHEN bool_and(usd_per_hour IS NOT NULL) THEN exact_sum(usd_per_hour) END AS usd_per_hour
    FROM piece_holders
    SEMI JOIN piece_pending USING (namespace, job, t0)
    GROUP BY namespace, job, t0, t1
    HAVING bool_and(devices > 0 AND idle_devices = devices)
),
stall_marked AS (
    SELECT *, coalesce(t0 <> lag(t1) OVER (PARTITION BY namespace, job ORDER BY t0), TRUE) AS new_stall FROM stalled
),
stall_pieces AS (
    SELECT *, sum(new_stall::INTEGER) OVER (PARTITION BY namespace, job ORDER BY t0) AS stall FROM stall_marked
),
stalls AS (
    SELECT namespace, job, stall, min(t0) AS since, max(t1) AS until,
           epoch(max(t1)) - epoch(min(t0)) AS seconds,
           exact_sum((epoch(t1) - epoch(t0)) * gpu_equivalents) / 3600.0 AS idle_gpu_hours,
           CASE WHEN bool_and(usd_per_hour IS NOT NULL) THEN exact_sum((epoch(t1) - epoch(t0)) * usd_per_hour) / 3600.0 END
               AS usd_held_idle
    FROM stall_pieces
    GROUP BY namespace, job, stall
    HAVING epoch(max(t1)) - epoch(min(t0)) >= $gang_min_seconds
),
stall_holders AS (
    SELECT s.namespace, s.job, s.stall, count(*) AS pods_holding, sum(gpu_count) AS gpus_held
    FROM (SELECT DISTINCT s.namespace, s.job, s.stall, h.pod, h.gpu_count
          FROM stalls s
          JOIN piece_holders h ON h.namespace = s.namespace AND h.job = s.job AND h.t0 >= s.since AND h.t0 < s.until) s
    GROUP BY s.namespace, s.job, s.stall
),
stall_pending AS (
    SELECT s.namespace, s.job, s.stall, count(*) AS pods_pending,
           CASE WHEN bool_and(gpu_request IS NOT NULL) THEN exact_sum(gpu_request) END AS gpus_pending
    FROM (SELECT s.namespace, s.job, s.stall, p.pod, max(r.gpu_request) AS gpu_request
          FROM stalls s
          JOIN piece_pending p ON p.namespace = s.namespace AND p.job = s.job AND p.t0 >= s.since AND p.t0 < s.until
          JOIN pending r ON r.namespace = p.namespace AND r.pod = p.pod
          GROUP BY s.namespace, s.job, s.stall, p.pod) s
    GROUP BY s.namespace, s.job, s.stall
),
partial AS (
    SELECT 'partial_allocation' AS kind, s.namespace, s.job, s.since, s.until, s.seconds,
           h.pods_holding, h.gpus_held, p.pods_pending, p.gpus_pending, s.idle_gpu_hours, s.usd_held_idle,
           NULL AS pod, NULL AS node, NULL AS gpu_uuid, CAST(NULL AS INTEGER) AS mig_gi_id,
           CAST(NULL AS DOUBLE) AS sm_active, CAST(NULL AS DOUBLE) AS job_median_sm_active,
           format('gang scheduling: the job holds {:g} GPUs idle waiting for {}; use a gang scheduler '
                  || '(Volcano/Kueue/KAI) or release', h.gpus_held,
                  coalesce(format('{:g} more', p.gpus_pending), format('{} more pods', p.pods_pending)))
               AS recommendation
    FROM stalls s
    JOIN stall_holders h USING (namespace, job, stall)
    JOIN stall_pending p USING (namespace, job, stall)
),
job_streams AS MATERIALIZED (
    -- a dense integer per job: the bucket scans below group and join millions of rows on it, not on names
    SELECT k.stream_id, k.namespace, j.job, k.pod, k.node, k.gpu_uuid, k.mig_gi_id, k.step_seconds,
           dense_rank() OVER (ORDER BY k.namespace, j.job) AS job_id
    FROM stg_streams k
    JOIN pod_jobs j USING (namespace, pod)
),
job_steps AS MATERIALIZED (
    SELECT job_id, any_value(namespace) AS namespace, any_value(job) AS job, max(step_seconds) AS step_seconds
    FROM job_streams GROUP BY job_id
),
multi_device_jobs AS MATERIALIZED (
    -- a bucket is judged only with two devices in it: a job with one stream never is
    SELECT job_id FROM job_streams GROUP BY job_id HAVING count(*) >= 2
),
stream_jobs AS MATERIALIZED (
    -- each stream of a multi-device job with the job's step (its buckets' length)
    SELECT s.stream_id, s.job_id, t.step_seconds
    FROM job_streams s
    JOIN job_steps t USING (job_id)
    SEMI JOIN multi_device_jobs USING (job_id)
),
job_rows AS (
    -- a row alone in its bucket (its neighbours a step or more away) is its stream's bucket as it is;
    -- only the others are grouped (the job and its step follow from the stream)
    SELECT r.stream_id, s.job_id, s.step_seconds,
           CAST(floor((epoch(r.ts) - epoch($start::TIMESTAMP)) / s.step_seconds) AS BIGINT) AS bucket,
           r.reported, r.effective,
           coalesce(r.dt_seconds >= s.step_seconds, TRUE) AND coalesce(r.next_dt_seconds >= s.step_seconds, TRUE)
               AS alone
    FROM stg_series_rows($start, $end) r
    JOIN stream_jobs s USING (stream_id)
),
all_buckets AS NOT MATERIALIZED (
    -- every device's value per bucket, computed twice rather than stored: only the buckets that spread
    -- (a small share) are kept, in buckets below
    SELECT job_id, stream_id, step_seconds, bucket,
           CAST(CAST(effective AS DECIMAL(38, 12)) AS DOUBLE) AS sm_active,  -- exact_avg of one value
           NOT is_idle(reported, effective, $idle_below) AS busy
    FROM job_rows WHERE alone
    UNION ALL
    SELECT job_id, stream_id, any_value(step_seconds), bucket,
           CASE WHEN count(effective) = count(*) THEN exact_avg(effective) END,
           bool_and(NOT is_idle(reported, effective, $idle_below))
    FROM job_rows WHERE NOT alone
    GROUP BY job_id, stream_id, bucket
),
bucket_spread AS MATERIALIZED (
    -- a device can lag only where the job's devices spread by at least the gap (the median lies
    -- between min and max) and at most one is not busy: the median is taken of those buckets alone
    SELECT job_id, bucket, any_value(step_seconds) AS step_seconds, count(*) AS devices,
           count(sm_active) AS known, count(*) FILTER (WHERE busy) AS busy_devices
    FROM all_buckets
    GROUP BY job_id, bucket
    HAVING count(*) >= 2 AND count(sm_active) = count(*) AND count(*) FILTER (WHERE busy) >= count(*) - 1
       AND max(sm_active) - min(sm_active) >= $straggler_gap
),
buckets AS MATERIALIZED (
    -- the devices' values in the buckets that spread (the only ones judged below)
    SELECT b.* FROM all_buckets b SEMI JOIN bucket_spread USING (job_id, bucket)
),
job_buckets AS MATERIALIZED (
    SELECT s.job_id, s.bucket, s.step_seconds, s.devices, s.known, s.busy_devices,
           list_median(list(b.sm_active)) AS median_sm_active
    FROM bucket_spread s
    JOIN buckets b USING (job_id, bucket)
    GROUP BY s.job_id, s.bucket, s.step_seconds, s.devices, s.known, s.busy_devices
),
pending_buckets AS MATERIALIZED (
    -- buckets a pod of the job was Pending in (an equality join on the job, then the overlap: an
    -- anti-join on the overlap alone is a nested loop over every bucket)
    SELECT DISTINCT b.job_id, b.bucket
    FROM job_buckets b
    JOIN job_steps t USING (job_id)
    JOIN pending p ON p.namespace = t.namespace AND p.job = t.job
    WHERE p.t0 < $start::TIMESTAMP + to_seconds((b.bucket + 1) * b.step_seconds)
      AND p.t1 > $start::TIMESTAMP + to_seconds(b.bucket * b.step_seconds)
),
judged_buckets AS MATERIALIZED (
    SELECT b.* FROM job_buckets b
    ANTI JOIN pending_buckets x USING (job_id, bucket)
    WHERE b.devices >= 2 AND b.known = b.devices
),
lagging AS MATERIALIZED (
    SELECT b.job_id, b.stream_id, b.bucket, b.step_seconds, b.sm_active, j.median_sm_active,
           b.bucket - row_number() OVER (PARTITION BY b.stream_id ORDER BY b.bucket) AS run
    FROM buckets b
    JOIN judged_buckets j USING (job_id, bucket)
    WHERE j.median_sm_active - b.sm_active >= $straggler_gap
      AND j.busy_devices - b.busy::INTEGER = j.devices - 1
),
lag_runs AS MATERIALIZED (
    SELECT job_id, stream_id, run, min(bucket) AS first_bucket, max(bucket) AS last_bucket,
           any_value(step_seconds) AS step_seconds, count(*) * any_value(step_seconds) AS seconds,
           exact_avg(sm_active) AS sm_active, exact_avg(median_sm_active) AS job_median_sm_active
    FROM lagging
    GROUP BY job_id, stream_id, run
    HAVING count(*) * any_value(step_seconds) >= $straggler_min_seconds
),
pod_gpus AS MATERIALIZED (
    -- a job pod's GPUs: the pods file's count, else its devices
    SELECT s.namespace, s.pod, coalesce(any_value(p.gpu_count), count(DISTINCT s.stream_id)) AS gpus
    FROM job_streams s
    LEFT JOIN stg_pods p USING (namespace, pod)
    GROUP BY s.namespace, s.pod
),
run_members AS MATERIALIZED (
    -- the job's pods with samples during the run
    SELECT DISTINCT l.job_id, l.stream_id, l.run, s.namespace, s.pod
    FROM lag_runs l
    JOIN buckets b ON b.job_id = l.job_id AND b.bucket BETWEEN l.first_bucket AND l.last_bucket
    JOIN job_streams s ON s.stream_id = b.stream_id
),
run_pods AS MATERIALIZED (
    SELECT m.job_id, m.stream_id, m.run, count(*) AS pods_holding, sum(g.gpus) AS gpus_held
    FROM run_members m
    JOIN pod_gpus g USING (namespace, pod)
    GROUP BY m.job_id, m.stream_id, m.run
),
stragglers AS (
    SELECT 'straggler' AS kind, t.namespace, t.job,
           $start::TIMESTAMP + to_seconds(l.first_bucket * l.step_seconds) AS since,
           $start::TIMESTAMP + to_seconds((l.last_bucket + 1) * l.step_seconds) AS until,
           l.seconds, r.pods_holding, r.gpus_held, 0 AS pods_pending, 0.0 AS gpus_pending,
           CAST(NULL AS DOUBLE) AS idle_gpu_hours, CAST(NULL AS DOUBLE) AS usd_held_idle,
           s.pod, s.node, s.gpu_uuid, s.mig_gi_id, l.sm_active, l.job_median_sm_active,
           format('straggler: {} on {} ran at {:.0f}% SM activity against the job''s median {:.0f}% for {:.0f} min; '
                  || 'check that GPU and node (clocks, throttling, PCIe/NVLink, neighbours) or cordon it',
                  s.pod, s.gpu_uuid || coalesce('/' || s.mig_gi_id, ''), l.sm_active * 100,
                  l.job_median_sm_active * 100, l.seconds / 60) AS recommendation
    FROM lag_runs l
    JOIN job_steps t USING (job_id)
    JOIN run_pods r USING (job_id, stream_id, run)
    JOIN job_streams s ON s.stream_id = l.stream_id
),
final AS (
    SELECT * FROM partial UNION ALL BY NAME SELECT * FROM stragglers
)
SELECT * FROM final
ORDER BY kind, round(usd_held_idle, 6) DESC NULLS LAST, namespace, job, since, pod, gpu_uuid, mig_gi_id, until
