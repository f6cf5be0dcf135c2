-- The keys of a load's samples (incoming_key_rows: the bundle's key columns) with the id each is stored
-- under: a stored key keeps its id; a new key takes sample_key_id() of it (computed_id) unless a stored
-- key or another new key has that id, else the next free negative id, in key order. The new ones are
-- stored. A load writes computed_id into its rows unless some key's id differs from it (store/keys.py).
CREATE OR REPLACE TEMP TABLE incoming_keys AS
WITH incoming AS (
    SELECT DISTINCT node, gpu_uuid, mig_gi_id, namespace, pod, container FROM incoming_key_rows
),
keyed AS (
    SELECT i.*, sample_key_id(i.node, i.gpu_uuid, i.mig_gi_id, i.namespace, i.pod, i.container) AS computed_id,
           k.key_id AS stored_id
    FROM incoming i
    LEFT JOIN sample_keys k
      ON k.node = i.node AND k.gpu_uuid = i.gpu_uuid AND k.mig_gi_id IS NOT DISTINCT FROM i.mig_gi_id
     AND k.namespace IS NOT DISTINCT FROM i.namespace AND k.pod IS NOT DISTINCT FROM i.pod
     AND k.container IS NOT DISTINCT FROM i.container
),
owned AS (
    SELECT *,
           stored_id IS NULL AND computed_id NOT IN (SELECT key_id FROM sample_keys)
           AND count(*) FILTER (WHERE stored_id IS NULL) OVER (PARTITION BY computed_id) = 1 AS own
    FROM keyed
)
SELECT CASE WHEN stored_id IS NOT NULL THEN stored_id
            WHEN own THEN computed_id
            ELSE least((SELECT min(key_id) FROM sample_keys), 0)
                 - row_number() OVER (PARTITION BY stored_id IS NULL AND NOT own
                                      ORDER BY node, gpu_uuid, mig_gi_id NULLS FIRST, namespace NULLS FIRST,
                                               pod NULLS FIRST, container NULLS FIRST) END AS key_id,
       computed_id, stored_id IS NULL AS is_new, node, gpu_uuid, mig_gi_id, namespace, pod, container
FROM owned;

INSERT INTO sample_keys
SELECT key_id, node, gpu_uuid, mig_gi_id, namespace, pod, container FROM incoming_keys WHERE is_new;
