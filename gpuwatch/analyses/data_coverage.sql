-- What data the store holds: first and last sample time, sampling step, devices, pods and teams seen.
-- params: (none)
-- columns: first_ts, last_ts, step_seconds, devices, pods, teams
-- Used to pick default windows (the app's time range, the report's last complete week).
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
           (SELECT count(DISTINCT team) FROM stg_pods) AS teams
)
SELECT * FROM final
