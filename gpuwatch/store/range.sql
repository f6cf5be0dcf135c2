-- The data the store holds, for data_range() (store/__init__.py): the first row has the first
-- sample (else the pods' first start) and the pods' last start or end; then one row per device
-- (node, gpu_uuid, mig_gi_id) with its first and last sample, from which data_range() finds the
-- end of the bulk of the data. Read from the staged rows (every raw sample's timestamp is there:
-- staging merges duplicates of one timestamp, never drops one), grouped by the integer stream id
-- before the device's text keys.
WITH streams AS (
    SELECT stream_id, min(ts) AS first_ts, max(ts) AS last_ts FROM stg_sample_rows GROUP BY stream_id
)
SELECT 0 AS kind, coalesce((SELECT min(first_ts) FROM streams), (SELECT min(start_ts) FROM pods)) AS first_ts,
       (SELECT greatest(max(start_ts), max(end_ts)) FROM pods) AS last_ts
UNION ALL
SELECT 1, min(s.first_ts), max(s.last_ts)
FROM streams s JOIN stg_streams k USING (stream_id)
GROUP BY k.node, k.gpu_uuid, k.mig_gi_id
ORDER BY kind
