-- A load replaces only the series it carries: for each device (node, gpu_uuid, mig_gi_id) in
-- incoming_samples, the stored samples of that device between its own first and last new
-- timestamp. Other devices' samples, and this device's outside that range, are never touched.
DELETE FROM sample_readings r
USING (SELECT k.key_id, c.lo, c.hi
       FROM sample_keys k
       JOIN (SELECT node, gpu_uuid, mig_gi_id, min(ts) AS lo, max(ts) AS hi
             FROM incoming_samples GROUP BY node, gpu_uuid, mig_gi_id) c
         ON k.node = c.node AND k.gpu_uuid = c.gpu_uuid AND k.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id) x
WHERE r.key_id = x.key_id AND r.ts BETWEEN x.lo AND x.hi;
