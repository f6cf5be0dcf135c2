-- The data the store holds, for data_range() (store/__init__.py): the first row has the first
-- sample (else the pods' first start) and the pods' last start or end; then one row per device
-- (node, gpu_uuid, mig_gi_id) with its first and last sample, from which data_range() finds the
-- end of the bulk of the data.
SELECT 0 AS kind, coalesce((SELECT min(ts) FROM samples), (SELECT min(start_ts) FROM pods)) AS first_ts,
       (SELECT greatest(max(start_ts), max(end_ts)) FROM pods) AS last_ts
UNION ALL
SELECT 1, min(ts), max(ts) FROM samples GROUP BY node, gpu_uuid, mig_gi_id
ORDER BY kind
