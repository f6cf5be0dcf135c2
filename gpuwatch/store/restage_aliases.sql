-- The stream aliases after a load: the new rows' keys counted in, the replaced rows' counted out; a key
-- with no samples left goes. restage_delta keeps both, so the streams that lost every row are touched too.
CREATE OR REPLACE TEMP TABLE restage_delta AS
SELECT * FROM stg_stream_aliases_for($salt, src := 'incoming_readings')
UNION ALL
SELECT * REPLACE (-samples AS samples) FROM stg_stream_aliases_for($salt, src := 'restage_removed');

CREATE OR REPLACE TABLE stg_stream_aliases AS
SELECT key_id, node, gpu_uuid, mig_gi_id, CAST(sum(samples) AS BIGINT) AS samples, raw_namespace, raw_pod,
       raw_container, namespace, pod, container, stream_id
FROM (SELECT * FROM stg_stream_aliases UNION ALL BY NAME SELECT * FROM restage_delta)
GROUP BY key_id, node, gpu_uuid, mig_gi_id, raw_namespace, raw_pod, raw_container, namespace, pod, container, stream_id
HAVING sum(samples) > 0;
