-- A load replaces only the series it carries: for each device (node, gpu_uuid, mig_gi_id) in
-- incoming_samples, the stored samples of that device between its own first and last new
-- timestamp (restage_carried.sql). Other devices' samples, and this device's outside that range, are
-- never touched.
DELETE FROM sample_readings r
USING restage_carried_keys x
WHERE r.key_id = x.key_id AND r.ts BETWEEN x.lo AND x.hi;
