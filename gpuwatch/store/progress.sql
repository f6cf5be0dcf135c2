-- How far the store's samples reach, per device, for progress() (store/progress.py) and so for
-- `gpuwatch ingest --since-last` (ingest/since.py). Read-only.
-- Params: $cluster  the cluster whose nodes count (stored as '<cluster>/<node>'); NULL = the nodes
--                   stored without a cluster qualifier
--         $lookback_seconds  only samples this close to the cluster's latest one are scanned (the
--                   catch-up horizon plus a day for the bulk end): older ones cannot change the answer,
--                   and a long store is not scanned whole on every cycle
-- Columns: node, gpu_uuid, mig_gi_id, first_ts, last_ts (the device's first and last sample in the
--          scanned range), node_last_ts (the latest sample of any of the node's devices)
WITH devices AS (
    -- the bound first (a scalar, so whole row groups are skipped by their ts range), then the nodes
    SELECT node, gpu_uuid, mig_gi_id, min(ts) AS first_ts, max(ts) AS last_ts
    FROM samples
    WHERE ts >= (SELECT max(ts) FROM samples
                 WHERE CASE WHEN $cluster IS NULL THEN NOT contains(node, '/')
                            ELSE starts_with(node, $cluster || '/') END)
                - to_seconds(CAST($lookback_seconds AS DOUBLE))
      AND CASE WHEN $cluster IS NULL THEN NOT contains(node, '/') ELSE starts_with(node, $cluster || '/') END
    GROUP BY node, gpu_uuid, mig_gi_id
), final AS (
    SELECT node, gpu_uuid, mig_gi_id, first_ts, last_ts, max(last_ts) OVER (PARTITION BY node) AS node_last_ts
    FROM devices
)
SELECT * FROM final ORDER BY node, gpu_uuid, mig_gi_id NULLS FIRST
