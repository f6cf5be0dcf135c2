-- The stream aliases after a load: the new rows' keys counted in, the replaced rows' counted out; a key
-- with no samples left goes. restage_delta keeps both, so the streams that lost every row are touched too.
CREATE OR REPLACE TEMP TABLE restage_delta AS
SELECT node, gpu_uuid, mig_gi_id, samples, raw_namespace, raw_pod, namespace, pod, stream_id
FROM stg_stream_aliases_for($salt, src := 'incoming_samples')
UNION ALL
SELECT node, gpu_uuid, mig_gi_id, -samples, namespace, pod, nullif(trim(namespace), ''), nullif(trim(pod), ''),
       stream_id_of($salt, node, gpu_uuid, mig_gi_id, nullif(trim(namespace), ''), nullif(trim(pod), ''))
FROM restage_removed;

CREATE OR REPLACE TABLE stg_stream_aliases AS
SELECT node, gpu_uuid, mig_gi_id, CAST(sum(samples) AS BIGINT) AS samples, raw_namespace, raw_pod, namespace, pod,
       stream_id
FROM (SELECT node, gpu_uuid, mig_gi_id, samples, raw_namespace, raw_pod, namespace, pod, stream_id
      FROM stg_stream_aliases
      UNION ALL
      SELECT * FROM restage_delta)
GROUP BY node, gpu_uuid, mig_gi_id, raw_namespace, raw_pod, namespace, pod, stream_id
HAVING sum(samples) > 0;
