-- After a load's readings are in: every reading of a carried device inside its range, new and kept
-- (a timestamp the load lacks keeps its stored readings), the values a re-stage places in the range.
CREATE OR REPLACE TEMP TABLE restage_range_readings AS
SELECT r.*
FROM sample_readings r
JOIN sample_keys k ON r.key_id = k.key_id
JOIN restage_carried c
  ON k.node = c.node AND k.gpu_uuid = c.gpu_uuid AND k.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id
 AND r.ts BETWEEN c.lo AND c.hi
WHERE r.ts BETWEEN (SELECT min(lo) FROM restage_carried) AND (SELECT max(hi) FROM restage_carried);
