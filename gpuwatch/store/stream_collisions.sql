-- Stream ids that two different stream keys hash to (stream_id_of): a full re-stage with another salt follows.
SELECT count(*)
FROM (SELECT DISTINCT stream_id, node, gpu_uuid, mig_gi_id, namespace, pod FROM stg_stream_aliases)
GROUP BY stream_id
HAVING count(*) > 1;
