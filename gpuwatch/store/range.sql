-- The data the store holds, for data_range() (store/__init__.py), against the analysis' own clock $now:
-- the first sample (else the pods' first start), the latest sample at or before $now (else the pods' last
-- start or end at or before it), and what lies after $now (samples, devices, the latest such time): a
-- clock running ahead, reported and left out of the default window. The latest sample of ANY device
-- counts (a fleet that shrinks overnight keeps its remaining nodes' latest data in the window).
-- Read from the staged rows (every raw sample's timestamp is there: staging merges duplicates of one
-- timestamp, never drops one).
WITH streams AS (
    SELECT stream_id, min(ts) AS first_ts, max(ts) FILTER (WHERE ts <= $now) AS last_ts,
           count(*) FILTER (WHERE ts > $now) AS ahead_n, max(ts) AS max_ts
    FROM stg_sample_rows GROUP BY stream_id
)
SELECT coalesce((SELECT min(first_ts) FROM streams), (SELECT min(start_ts) FROM pods)) AS first_ts,
       coalesce((SELECT max(last_ts) FROM streams),
                (SELECT greatest(max(start_ts) FILTER (WHERE start_ts <= $now), max(end_ts) FILTER (WHERE end_ts <= $now))
                 FROM pods)) AS last_ts,
       coalesce((SELECT sum(ahead_n) FROM streams), 0) AS ahead_n,
       (SELECT count(DISTINCT (k.node, k.gpu_uuid)) FROM streams s JOIN stg_streams k USING (stream_id) WHERE s.ahead_n > 0)
           AS ahead_devices,
       (SELECT max(max_ts) FROM streams WHERE ahead_n > 0) AS ahead_last_ts
