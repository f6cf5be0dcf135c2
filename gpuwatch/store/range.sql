-- The data the store holds: first and last sample (or pod start/end when there are no samples).
SELECT coalesce((SELECT min(ts) FROM samples), (SELECT min(start_ts) FROM pods)) AS first_ts,
       coalesce((SELECT max(ts) FROM samples),
                (SELECT greatest(max(start_ts), max(end_ts)) FROM pods)) AS last_ts
