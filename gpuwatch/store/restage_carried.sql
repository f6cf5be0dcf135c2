-- What a load's samples replace (replace_series.sql): per device, the range between its first and last
-- new timestamp; and, per raw key, how many stored samples in those ranges go (the aliases' counts).
CREATE OR REPLACE TEMP TABLE restage_carried AS
SELECT node, gpu_uuid, mig_gi_id, min(ts) AS lo, max(ts) AS hi
FROM incoming_samples
GROUP BY node, gpu_uuid, mig_gi_id;

CREATE OR REPLACE TEMP TABLE restage_removed AS
SELECT s.node, s.gpu_uuid, s.mig_gi_id, s.namespace, s.pod, count(*) AS samples
FROM samples s
JOIN restage_carried c
  ON s.node = c.node AND s.gpu_uuid = c.gpu_uuid AND s.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id
 AND s.ts BETWEEN c.lo AND c.hi
WHERE s.ts BETWEEN (SELECT min(lo) FROM restage_carried) AND (SELECT max(hi) FROM restage_carried)
GROUP BY ALL;
