-- The data the store holds: the first sample, and the end of the bulk of it: the 90th percentile of
-- the devices' last samples, so a few devices with a far-off timestamp (a clock off by hours, a
-- unit slip inside the accepted range) cannot move "the last 7 days" away from everyone else's
-- data. Without samples: the pods' first start and last start/end.
WITH device_last AS (
    SELECT max(ts) AS last_ts FROM samples GROUP BY node, gpu_uuid, mig_gi_id
)
SELECT coalesce((SELECT min(ts) FROM samples), (SELECT min(start_ts) FROM pods)) AS first_ts,
       coalesce((SELECT quantile_disc(last_ts, 0.9) FROM device_last),
                (SELECT greatest(max(start_ts), max(end_ts)) FROM pods)) AS last_ts
