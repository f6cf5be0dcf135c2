-- What data the store holds: first and last sample time, sampling step, devices, pods and teams seen.
-- params: (none)
-- columns: first_ts, last_ts, step_seconds, devices, pods, teams
-- Used to pick default windows (the app's time range, the report's last complete week).
WITH distinct_ts AS (
    SELECT DISTINCT ts FROM stg_sample_rows
),
step AS (
    SELECT median(gap) AS seconds
    FROM (SELECT epoch(ts) - lag(epoch(ts)) OVER (ORDER BY ts) AS gap FROM distinct_ts)
    WHERE gap > 0
),
final AS (
    SELECT (SELECT min(ts) FROM distinct_ts) AS first_ts,
           (SELECT max(ts) FROM distinct_ts) AS last_ts,
           (SELECT seconds FROM step) AS step_seconds,
           (SELECT count(*) FROM stg_devices) AS devices,
           (SELECT count(*) FROM stg_pods) AS pods,
           (SELECT count(DISTINCT team) FROM stg_pods) AS teams
)
SELECT * FROM final
