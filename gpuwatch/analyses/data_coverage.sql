-- What data the store holds: first and last sample time, sampling step, devices, pods and teams seen.
-- params: (none)
-- columns: first_ts, last_ts, step_seconds, devices, pods, teams, conflicted_samples, zero_count_pods
-- Used to pick default windows (the app's time range, the report's last complete week).
-- conflicted_samples: samples whose duplicate copies disagreed (staging: their values are unknown);
-- zero_count_pods: pods the pods file lists with gpu_count 0 whose samples show them on a GPU (charged
-- for those samples at the device's price, stg_streams). `gpuwatch analyze` reports both when not 0.
-- step_seconds: the median of the streams' series steps (stg_streams; nodes sampled at other offsets
-- do not shrink it, as the gaps between all distinct sample times would), else, without any series,
-- the median gap between distinct sample times.
WITH series_step AS (
    SELECT median(step_seconds) AS seconds FROM stg_streams WHERE step_seconds IS NOT NULL
),
row_step AS (
    SELECT median(gap) AS seconds
    FROM (SELECT epoch(ts) - lag(epoch(ts)) OVER (ORDER BY ts) AS gap
          FROM (SELECT DISTINCT ts FROM stg_sample_rows WHERE (SELECT seconds FROM series_step) IS NULL))
    WHERE gap > 0
),
final AS (
    SELECT (SELECT min(ts) FROM stg_sample_rows) AS first_ts,
           (SELECT max(ts) FROM stg_sample_rows) AS last_ts,
           coalesce((SELECT seconds FROM series_step), (SELECT seconds FROM row_step)) AS step_seconds,
           (SELECT count(*) FROM stg_devices) AS devices,
           (SELECT count(*) FROM stg_pods) AS pods,
           (SELECT count(DISTINCT team) FROM stg_pods) AS teams,
           (SELECT count(*) FROM stg_sample_rows WHERE conflicted) AS conflicted_samples,
           (SELECT count(*) FROM stg_pods p WHERE p.requested_gpu_count = 0
              AND EXISTS (SELECT 1 FROM stg_streams k WHERE k.namespace = p.namespace AND k.pod = p.pod)) AS zero_count_pods
)
SELECT * FROM final
