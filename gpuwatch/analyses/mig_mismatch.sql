-- MIG/GPU size mismatch: pods that keep failing at their device's memory limit, what it burns, and the profile that would hold them.
-- params: $start, $end (timestamps, window [start, end)), $mismatch_mem_share (ratio), $mismatch_min_failures (count), $mem_headroom (ratio)
-- columns: namespace, pod, team, node, gpu_uuid, mig_gi_id, mig_profile, failed_runs, peak_fb_used_bytes, fb_total_bytes, cause, recommended_profile, gpu_hours_burnt, usd_burnt, first_failure, last_failure, job, pods
-- docs/architecture.md#finding-semantics. Runs come from stg_pod_status, per (pod, container): a run
-- starts when the container leaves Pending (or is first seen past it, or its restart count falls: a new
-- pod of that name) and ends at a termination: a row whose restart count rose over the last known one,
-- or whose phase turned Failed. A jump of several restarts between two rows is one termination (only
-- the last one's reason and exit code are known); the first row of a container is never one (its run's
-- start is unknown). A run failed when its termination has a non-zero exit code or reason Error/OOMKilled.
-- A failed run's peak is the pod's max fb_used_bytes per device (samples on its devices, that
-- container's where samples name one, from the run's start clipped to $start up to but not including
-- the termination row); a run without samples is unknown, never counted. cause 'gpu_memory': a failure
-- other than OOMKilled whose peak reached $mismatch_mem_share x a device's fb_total_bytes (a CUDA
-- out-of-memory ends as Error with a non-zero code); 'host_memory': an OOMKilled run at any GPU memory
-- (the container's cgroup limit, not the GPU's size: reported so nobody resizes the GPU, no profile).
-- Failures below the share that are not OOMKilled are not counted. One row per job (stg_pod_status.job;
-- a pod without one is its own group) and cause with at least $mismatch_min_failures such runs ending in
-- the window (a job failing both ways has two rows): the retries of a restartPolicy-Never job, each a new
-- pod that fails once, add up as the restarts of one pod do. pod = the pod whose device came closest
-- to its limit (peak / fb_total_bytes), that device the row's; pods = the pods the runs came from.
-- recommended_profile ('gpu_memory' only): the smallest MIG profile (memory slices first, then compute;
-- 7g and +me excluded, as in rightsizing) larger than the instance whose instance memory covers the peak
-- x (1 + $mem_headroom): stg_mig_targets, what the GPUs reported (an H100's 1g.20gb holds 20096 MiB,
-- not 2/8 of 81559), with NVIDIA's name ("1g.20gb"); 'whole GPU' when every larger profile's memory is
-- known and none does; NULL (unknown) when none of the known ones does and some is unknown; 'larger
-- GPU' when the pod already has a whole GPU. The peak is capped by the device, so the profile is a
-- lower bound.
-- Burnt = the failed runs' time (crash-loop back-off included: the GPU stays held; runs of several
-- containers or pods overlapping count once) x each run's pod's GPU share (stg_streams, as chargeback) and
-- x its price per hour (NULL when a device of any of the pods is unpriced, never $0).
WITH states AS (
    SELECT namespace, pod, container, ts, restarts, lower(phase) AS phase,
           lower(last_terminated_reason) AS reason, last_exit_code,
           lag(restarts IGNORE NULLS) OVER w AS prev_restarts,
           lag(lower(phase) IGNORE NULLS) OVER w AS prev_phase,
           row_number() OVER w AS nth
    FROM stg_pod_status
    WHERE ts < $end
    WINDOW w AS (PARTITION BY namespace, pod, container ORDER BY ts)
),
edges AS (
    SELECT *,
           nth > 1 AND coalesce(restarts > prev_restarts
                                OR (phase = 'failed' AND prev_phase IS DISTINCT FROM 'failed'), FALSE) AS ended,
           coalesce(phase, '') <> 'pending'
               AND (nth = 1 OR coalesce(prev_phase IN ('pending', 'failed', 'succeeded'), FALSE)
                    OR coalesce(restarts < prev_restarts, FALSE)) AS started
    FROM states
),
bounded AS (
    -- each termination's run began at the previous boundary (a start or a termination)
    SELECT *, lag(ts) OVER (PARTITION BY namespace, pod, container ORDER BY ts) AS run_start
    FROM edges
    WHERE ended OR started
),
failed_runs AS (
    SELECT namespace, pod, container, greatest(run_start, $start::TIMESTAMP) AS run_from, ts AS ended_at,
           CASE WHEN reason = 'oomkilled' THEN 'host_memory' ELSE 'gpu_memory' END AS cause
    FROM bounded
    WHERE ended AND run_start IS NOT NULL AND ts >= $start
      AND (coalesce(last_exit_code <> 0, FALSE) OR coalesce(reason IN ('error', 'oomkilled'), FALSE))
),
sliced AS (
    SELECT d.*, coalesce(m.memory_slices, d.mig_placement_size) AS instance_slices
    FROM stg_devices d
    LEFT JOIN ref_mig_profiles m ON m.profile_id = d.mig_profile_id
),
gpu_memory AS (
    SELECT node, gpu_uuid,
           greatest(max(fb_total_bytes) FILTER (WHERE mig_gi_id IS NULL),
                    max(fb_total_bytes / mig_memory_share(instance_slices)) FILTER (WHERE mig_gi_id IS NOT NULL))
               AS gpu_fb_total_bytes
    FROM sliced
    GROUP BY node, gpu_uuid
),
devices AS (
    -- the pods' devices with their memory, and the whole GPU's
    SELECT k.stream_id, k.namespace, k.pod, k.node, k.gpu_uuid, k.mig_gi_id, d.mig_profile, d.fb_total_bytes,
           d.instance_slices, g.gpu_fb_total_bytes
    FROM stg_streams k
    JOIN sliced d ON d.node = k.node AND d.gpu_uuid = k.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM k.mig_gi_id
    JOIN gpu_memory g ON g.node = k.node AND g.gpu_uuid = k.gpu_uuid
    WHERE k.pod IS NOT NULL AND d.fb_total_bytes > 0
),
run_peaks AS (
    SELECT f.namespace, f.pod, f.container, f.ended_at, f.run_from, f.cause, d.stream_id, d.fb_total_bytes,
           max(r.fb_used_bytes) AS peak_fb_used_bytes
    FROM failed_runs f
    JOIN devices d ON d.namespace = f.namespace AND d.pod = f.pod
    JOIN stg_sample_rows r ON r.stream_id = d.stream_id AND r.ts >= f.run_from AND r.ts < f.ended_at
    LEFT JOIN stg_stream_aliases c ON c.key_id = r.container_key  -- the sample's container
    WHERE f.container IS NULL OR c.container IS NULL OR c.container = f.container
    GROUP BY ALL
),
runs AS (
    -- counted runs (OOMKilled, or at the limit), one row each, with the device that came closest to it
    SELECT namespace, pod, container, ended_at, any_value(run_from) AS run_from, any_value(cause) AS cause,
           arg_max({'stream_id': stream_id, 'peak': peak_fb_used_bytes, 'share': peak_fb_used_bytes / fb_total_bytes},
                   [peak_fb_used_bytes / fb_total_bytes, -stream_id]) AS fullest
    FROM run_peaks
    WHERE peak_fb_used_bytes IS NOT NULL
      AND (cause = 'host_memory' OR peak_fb_used_bytes >= $mismatch_mem_share * fb_total_bytes)
    GROUP BY namespace, pod, container, ended_at
),
jobs AS (
    -- the job each pod belongs to (stg_pod_status.job: gang label or owner); NULL: the pod alone
    SELECT namespace, pod, max(job) AS job FROM stg_pod_status GROUP BY namespace, pod
),
pod_rates AS (
    -- what the pod holds per hour: its streams' GPU shares and prices (unpriced anywhere: unknown)
    SELECT namespace, pod, any_value(team) AS team, exact_sum(gpu_share) AS gpu_share,
           CASE WHEN bool_and(usd_per_hour IS NOT NULL) THEN exact_sum(usd_per_hour) END AS usd_per_hour
    FROM stg_streams
    WHERE pod IS NOT NULL
    GROUP BY namespace, pod
),
keyed AS (
    -- retries of one job (restartPolicy Never: each failure is a new pod) are one group
    SELECT r.*, j.job, coalesce('job:' || j.job, 'pod:' || r.pod) AS group_key
    FROM runs r LEFT JOIN jobs j USING (namespace, pod)
),
spans AS (
    -- the part of each run no earlier run (of another container or pod) already covered
    SELECT *, max(ended_at) OVER (PARTITION BY namespace, group_key, cause ORDER BY run_from, ended_at
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until
    FROM keyed
),
burnt AS (
    SELECT s.*, greatest(epoch(s.ended_at) - epoch(greatest(s.run_from, coalesce(s.covered_until, s.run_from))), 0)
               AS burnt_seconds, r.gpu_share, r.usd_per_hour
    FROM spans s LEFT JOIN pod_rates r USING (namespace, pod)
),
per_pod AS (
    SELECT namespace, group_key, cause, any_value(job) AS job, count(*) AS failed_runs, count(DISTINCT pod) AS pods,
           arg_max(pod, [fullest.share, -fullest.stream_id]) AS pod,
           arg_max(fullest, [fullest.share, -fullest.stream_id]) AS fullest,
           exact_sum(burnt_seconds * gpu_share) / 3600.0 AS gpu_hours_burnt,
           CASE WHEN bool_and(usd_per_hour IS NOT NULL) THEN usd_cents(exact_sum(burnt_seconds * usd_per_hour) / 3600.0) END AS usd_burnt,
           min(ended_at) AS first_failure, max(ended_at) AS last_failure
    FROM burnt
    GROUP BY namespace, group_key, cause
    HAVING count(*) >= $mismatch_min_failures
),
kinds AS (
    -- the GPU kind (stg_mig_targets' model and FB total MiB) of each device: its whole GPU's, or the size
    -- its instances' own FB totals name; none known: no profile is recommended (unknown, not guessed)
    SELECT DISTINCT d.node, d.gpu_uuid, t.gpu_model, t.gpu_fb_mib
    FROM sliced d
    JOIN stg_mig_targets t ON t.gpu_model = d.gpu_model
     AND (d.mig_gi_id IS NULL AND t.gpu_fb_mib = d.fb_total_bytes // 1048576
          OR d.mig_gi_id IS NOT NULL AND t.profile_id = d.mig_profile_id AND t.memory_bytes = d.fb_total_bytes)
),
sized AS (
    SELECT p.*, d.node, d.gpu_uuid, d.mig_gi_id, d.mig_profile, d.fb_total_bytes, p.fullest.peak AS peak_fb_used_bytes,
           (SELECT arg_min(t.profile, [t.memory_slices, t.compute_slices])
            FROM kinds k
            JOIN stg_mig_targets t ON t.gpu_model = k.gpu_model AND t.gpu_fb_mib = k.gpu_fb_mib
            WHERE k.node = d.node AND k.gpu_uuid = d.gpu_uuid
              AND mig_gpu_share(t.compute_slices) < 1 AND t.label NOT LIKE '%+me'
              AND t.memory_slices > coalesce(d.instance_slices, 0)
              AND t.memory_bytes >= p.fullest.peak * (1 + $mem_headroom))
               AS fitting_profile,
           (SELECT count(*) FROM ref_mig_profiles f
            WHERE mig_gpu_share(f.compute_slices) < 1 AND f.label NOT LIKE '%+me'
              AND f.memory_slices > coalesce(d.instance_slices, 0)
              AND NOT EXISTS (SELECT 1 FROM kinds k
                              JOIN stg_mig_targets t ON t.gpu_model = k.gpu_model AND t.gpu_fb_mib = k.gpu_fb_mib
                              WHERE k.node = d.node AND k.gpu_uuid = d.gpu_uuid AND t.profile_id = f.profile_id))
               AS unknown_larger,
           d.gpu_fb_total_bytes
    FROM per_pod p
    JOIN devices d ON d.stream_id = p.fullest.stream_id
),
final AS (
    SELECT s.namespace, s.pod, coalesce(a.team, r.team, s.namespace) AS team, s.node, s.gpu_uuid, s.mig_gi_id,
           s.mig_profile, s.failed_runs, s.peak_fb_used_bytes, s.fb_total_bytes, s.cause,
           CASE WHEN s.cause = 'host_memory' THEN NULL
                WHEN s.mig_gi_id IS NULL THEN 'larger GPU'
                WHEN s.fitting_profile IS NOT NULL THEN s.fitting_profile
                WHEN s.gpu_fb_total_bytes IS NULL OR s.unknown_larger > 0 THEN NULL
                ELSE 'whole GPU' END AS recommended_profile,
           s.gpu_hours_burnt, s.usd_burnt, s.first_failure, s.last_failure, s.job, s.pods
    FROM sized s
    LEFT JOIN pod_rates r USING (namespace, pod)
    LEFT JOIN stg_pods a USING (namespace, pod)
)
SELECT * FROM final ORDER BY round(usd_burnt, 6) DESC NULLS LAST, round(gpu_hours_burnt, 6) DESC, namespace, pod, cause
