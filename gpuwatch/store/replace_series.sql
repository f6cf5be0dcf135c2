-- A load replaces only what it carries: for each device (node, gpu_uuid, mig_gi_id) in
-- incoming_samples, the stored samples of that device (every pod's row) at the timestamps the load
-- carries for it (restage_carried.sql). A timestamp the load lacks keeps its stored samples, even
-- between the device's first and last new one (a partial Prometheus reply, an HA replica's gap);
-- other devices' samples are never touched.
DELETE FROM sample_readings r
USING restage_carried_keys x, restage_carried_ts t
WHERE r.key_id = x.key_id AND r.ts BETWEEN x.lo AND x.hi AND t.device = x.device AND r.ts = t.ts;
