-- A load replaces only the series it carries: for each device (node, gpu_uuid, mig_gi_id) in
-- incoming_samples, the stored samples of that device between its own first and last new
-- timestamp. Other devices' samples, and this device's outside that range, are never touched.
DELETE FROM samples
USING (SELECT node, gpu_uuid, mig_gi_id, min(ts) AS lo, max(ts) AS hi
       FROM incoming_samples GROUP BY node, gpu_uuid, mig_gi_id) AS carried
WHERE samples.node = carried.node AND samples.gpu_uuid = carried.gpu_uuid
  AND samples.mig_gi_id IS NOT DISTINCT FROM carried.mig_gi_id
  AND samples.ts BETWEEN carried.lo AND carried.hi;
