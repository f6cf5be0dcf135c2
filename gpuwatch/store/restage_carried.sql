-- What a load's samples replace (replace_series.sql): per device, the timestamps it carries for that
-- device (restage_carried_ts), their range (restage_carried: lo, hi; what a re-stage re-places), and
-- each stored key of those devices with its device's range.
CREATE OR REPLACE TEMP TABLE restage_carried AS
SELECT node, gpu_uuid, mig_gi_id, min(ts) AS lo, max(ts) AS hi,
       row_number() OVER (ORDER BY node, gpu_uuid, mig_gi_id NULLS FIRST) AS device
FROM incoming_samples
GROUP BY node, gpu_uuid, mig_gi_id;

CREATE OR REPLACE TEMP TABLE restage_carried_ts AS
SELECT DISTINCT c.device, i.ts
FROM incoming_samples i
JOIN restage_carried c
  ON i.node = c.node AND i.gpu_uuid = c.gpu_uuid AND i.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id;

CREATE OR REPLACE TEMP TABLE restage_carried_keys AS
SELECT k.key_id, c.device, c.lo, c.hi
FROM sample_keys k
JOIN restage_carried c
  ON k.node = c.node AND k.gpu_uuid = c.gpu_uuid AND k.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id;
