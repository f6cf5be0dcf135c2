-- What a load's samples replace (replace_series.sql): per device, the range between its first and last
-- new timestamp, and each stored key of those devices with its device's range.
CREATE OR REPLACE TEMP TABLE restage_carried AS
SELECT node, gpu_uuid, mig_gi_id, min(ts) AS lo, max(ts) AS hi
FROM incoming_samples
GROUP BY node, gpu_uuid, mig_gi_id;

CREATE OR REPLACE TEMP TABLE restage_carried_keys AS
SELECT k.key_id, c.lo, c.hi
FROM sample_keys k
JOIN restage_carried c
  ON k.node = c.node AND k.gpu_uuid = c.gpu_uuid AND k.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id;
