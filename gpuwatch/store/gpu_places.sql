-- One GPU UUID is one GPU: the nodes each GPU a load touched (load_gpus) is held under, in devices and
-- in the samples' keys, where it is held under more than one. Cheap (keys, not readings); empty in a
-- fleet whose GPUs never changed node, and then nothing else is read.
CREATE OR REPLACE TEMP TABLE gpu_places AS
WITH held AS (
    SELECT gpu_uuid, node, TRUE AS listed FROM devices WHERE gpu_uuid IN (SELECT gpu_uuid FROM load_gpus)
    UNION ALL
    SELECT gpu_uuid, node, FALSE FROM sample_keys WHERE gpu_uuid IN (SELECT gpu_uuid FROM load_gpus)
)
SELECT gpu_uuid, node, bool_or(listed) AS listed
FROM held
GROUP BY gpu_uuid, node
QUALIFY count(*) OVER (PARTITION BY gpu_uuid) > 1;

-- Where a GPU is held under several nodes: the span of each node's samples of it, and the pairs of nodes
-- that held it at once. A pair held it at once when each node has a sample of it inside the other's span
-- (interleaved or simultaneous samples: two copies of one GPU), or when a node lists it without a sample
-- to say when (no evidence it moved). A GPU that moved (one node's samples all before the other's) is
-- history: each node held it for its own time. A key left with no sample and no device row holds nothing.
CREATE OR REPLACE TEMP TABLE gpu_place_readings AS
SELECT k.gpu_uuid, k.node, r.ts
FROM sample_readings r
JOIN sample_keys k USING (key_id)
WHERE r.key_id IN (SELECT k2.key_id FROM sample_keys k2 JOIN gpu_places p USING (gpu_uuid, node));

CREATE OR REPLACE TEMP TABLE gpu_place_pairs AS
WITH spans AS (
    SELECT p.gpu_uuid, p.node, p.listed, min(r.ts) AS lo, max(r.ts) AS hi
    FROM gpu_places p LEFT JOIN gpu_place_readings r USING (gpu_uuid, node)
    GROUP BY ALL
    HAVING p.listed OR min(r.ts) IS NOT NULL
)
SELECT a.gpu_uuid, a.node AS node_a, b.node AS node_b,
       a.lo IS NULL OR b.lo IS NULL AS unevidenced
FROM spans a
JOIN spans b ON a.gpu_uuid = b.gpu_uuid AND a.node < b.node
WHERE a.lo IS NULL OR b.lo IS NULL
   OR (EXISTS (SELECT 1 FROM gpu_place_readings r WHERE r.gpu_uuid = a.gpu_uuid AND r.node = a.node
                                                    AND r.ts BETWEEN b.lo AND b.hi)
       AND EXISTS (SELECT 1 FROM gpu_place_readings r WHERE r.gpu_uuid = b.gpu_uuid AND r.node = b.node
                                                        AND r.ts BETWEEN a.lo AND a.hi))
ORDER BY a.gpu_uuid, a.node, b.node;
