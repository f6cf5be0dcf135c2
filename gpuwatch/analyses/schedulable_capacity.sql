-- Schedulable capacity: per time bucket and GPU pool, the free GPUs and the k-GPU pods (k = 1, 2, 4, 8) that could start, plain and on fully NVLink-connected blocks.
-- params: $start, $end (timestamps, window [start, end)), $capacity_bucket_seconds (seconds per bucket)
-- columns: bucket_ts, gpu_model, nodes, gpus, free_gpus, largest_nvlink_block, largest_numa_block, largest_pcie_switch_block, jobs_1, jobs_2, jobs_4, jobs_8, nvlink_jobs_1, nvlink_jobs_2, nvlink_jobs_4, nvlink_jobs_8, topology_known_gpus
-- docs/architecture.md#topology. Whole GPUs only (a MIG-enabled GPU is not schedulable as a whole GPU);
-- a node's GPUs are numbered 0.. by (gpu_index, gpu_uuid) and a set of them is a bit mask (position).
-- A node's buckets are judged only while it was observed (its samples, first .. one step past the last):
-- before or after that its GPUs are unknown, never free. A GPU is held at a bucket's start t when a pod of the pods file lists it in device_ids and
-- start_ts <= t < end_ts (end_ts NULL: still running); a pod listing no devices holds ceil(gpu_count) GPUs
-- of its node, unplaced (the node's free count drops; its blocks are then unknown). MIG pods hold MIG
-- instances, not whole GPUs. Record kinds, finished by schedulable_capacity.py (gpuwatch.topology's exact
-- block searches, once per distinct node layout and free mask):
--   gpu    one per whole GPU: node, gpu_uuid, gpu_index, gpu_model, numa_node, position
--   link   one per known ordered pair (stg_topology): node, position, peer_position, link, nvlinks
--   free   one per run of buckets [bucket_from, bucket_to) (numbered from 0 at $start; bucket_ts = the
--          run's first) in which a node's free set stays the same: node, gpu_model, gpus, free_gpus,
--          free_mask (NULL on nodes of more than 62 GPUs), unplaced
--   alloc  one per pod holding whole GPUs in the window: node, namespace, pod, start_ts, end_ts, mask (who
--          holds which GPU at an instant: node_blocks, blocked demand's defragmentation move)
WITH devices AS (
    -- one scan of stg_devices: a GPU with MIG instance rows is MIG-enabled
    SELECT node, gpu_uuid, gpu_model, gpu_index, numa_node, mig_gi_id,
           bool_or(mig_gi_id IS NOT NULL) OVER (PARTITION BY node, gpu_uuid) AS mig
    FROM stg_devices
),
gpus AS (
    SELECT node, gpu_uuid, gpu_model, gpu_index, numa_node,
           CAST(row_number() OVER (PARTITION BY node ORDER BY gpu_index NULLS LAST, gpu_uuid) - 1 AS INTEGER)
               AS position
    FROM devices
    WHERE mig_gi_id IS NULL AND NOT mig
),
nodes AS (
    SELECT node, min(gpu_model) AS gpu_model, count(*) AS gpus,
           CASE WHEN count(*) <= 62 THEN (CAST(1 AS BIGINT) << count(*)) - 1 END AS full_mask
    FROM gpus GROUP BY node
),
links AS (
    SELECT a.node, a.position, b.position AS peer_position, t.link, t.nvlinks
    FROM stg_topology t
    JOIN gpus a ON a.node = t.node AND a.gpu_uuid = t.gpu_uuid
    JOIN gpus b ON b.node = t.node AND b.gpu_uuid = t.peer_gpu_uuid
),
buckets AS (
    SELECT b AS bucket, $start::TIMESTAMP + to_seconds(b * $capacity_bucket_seconds) AS bucket_ts
    FROM range(0, CAST(ceil((epoch($end::TIMESTAMP) - epoch($start::TIMESTAMP)) / $capacity_bucket_seconds) AS BIGINT)) r(b)
),
pod_devices AS (
    SELECT namespace, pod, node, mig_profile, gpu_count, coalesce(start_ts, $start::TIMESTAMP) AS start_ts, end_ts,
           trim(unnest(string_split(coalesce(device_ids, ''), ','))) AS gpu_uuid
    FROM stg_pods
    WHERE coalesce(start_ts, $start::TIMESTAMP) < $end::TIMESTAMP AND (end_ts IS NULL OR end_ts > $start::TIMESTAMP)
),
allocations AS (
    SELECT d.namespace, d.pod, d.node, any_value(d.start_ts) AS start_ts, any_value(d.end_ts) AS end_ts,
           bit_or(CASE WHEN g.position < 62 THEN CAST(1 AS BIGINT) << g.position END) AS mask,
           count(g.gpu_uuid) AS matched,
           CASE WHEN count(g.gpu_uuid) = 0 AND bool_and(d.gpu_uuid = '') AND any_value(d.mig_profile) IS NULL
                THEN any_value(d.gpu_count) ELSE 0 END AS unplaced
    FROM pod_devices d
    LEFT JOIN gpus g ON g.node = d.node AND g.gpu_uuid = d.gpu_uuid
    GROUP BY d.namespace, d.pod, d.node
),
held AS (
    -- the buckets whose start an allocation covers: start_ts <= bucket_ts < end_ts
    SELECT node, mask, matched, unplaced,
           unnest(range(greatest(CAST(ceil((epoch(start_ts) - epoch($start::TIMESTAMP)) / $capacity_bucket_seconds) AS BIGINT), 0),
                        CASE WHEN end_ts IS NULL THEN (SELECT count(*) FROM buckets)
                             ELSE least(CAST(ceil((epoch(end_ts) - epoch($start::TIMESTAMP)) / $capacity_bucket_seconds) AS BIGINT),
                                        (SELECT count(*) FROM buckets)) END)) AS bucket
    FROM allocations
    WHERE matched > 0 OR unplaced > 0
),
node_seen AS (
    -- when each node was observed (its samples in the window, to one step past the last; a sample in the
    -- bucket before the window counts, so samples off the bucket grid still cover the first bucket): a
    -- bucket outside that is unknown time, never free GPUs
    SELECT k.node, greatest(min(r.first_ts), $start::TIMESTAMP) AS first_ts,
           max(r.last_ts + to_seconds(coalesce(k.step_seconds, 60.0))) AS last_ts
    FROM (SELECT stream_id, min(ts) AS first_ts, max(ts) AS last_ts FROM stg_sample_rows
          WHERE ts >= $start::TIMESTAMP - to_seconds($capacity_bucket_seconds) AND ts < $end GROUP BY stream_id) r
    JOIN stg_streams k USING (stream_id)
    GROUP BY k.node
),
held_by_bucket AS (
    SELECT node, bucket, bit_or(mask) AS held_mask, exact_sum(matched) AS matched, ceil(exact_sum(unplaced)) AS unplaced
    FROM held GROUP BY node, bucket
),
free AS (
    SELECT n.node, n.gpu_model, b.bucket, n.gpus,
           CAST(greatest(n.gpus - CASE WHEN n.full_mask IS NOT NULL THEN bit_count(coalesce(h.held_mask, 0) & n.full_mask)
                                       ELSE least(coalesce(h.matched, 0), n.gpus) END
                         - coalesce(h.unplaced, 0), 0) AS INTEGER) AS free_gpus,
           n.full_mask - (coalesce(h.held_mask, 0) & n.full_mask) AS free_mask,
           CAST(coalesce(h.unplaced, 0) AS INTEGER) AS unplaced
    FROM buckets b
    CROSS JOIN nodes n
    JOIN node_seen s ON s.node = n.node AND b.bucket_ts >= s.first_ts AND b.bucket_ts < s.last_ts
    LEFT JOIN held_by_bucket h ON h.node = n.node AND h.bucket = b.bucket
),
islands AS (
    -- consecutive buckets of one node in the same state share bucket - row_number()
    SELECT *, bucket - row_number() OVER (PARTITION BY node, free_gpus, free_mask, unplaced ORDER BY bucket) AS island
    FROM free
),
spans AS (
    SELECT 'free' AS kind, node, any_value(gpu_model) AS gpu_model, any_value(gpus) AS gpus, free_gpus, free_mask,
           unplaced, min(bucket) AS bucket_from, max(bucket) + 1 AS bucket_to,
           $start::TIMESTAMP + to_seconds(min(bucket) * $capacity_bucket_seconds) AS bucket_ts
    FROM islands
    GROUP BY node, free_gpus, free_mask, unplaced, island
),
allocs AS (
    SELECT 'alloc' AS kind, node, namespace, pod, start_ts, end_ts, mask FROM allocations WHERE matched > 0
),
final AS (
    SELECT 'gpu' AS kind, node, gpu_model, gpu_uuid, gpu_index, numa_node, position FROM gpus
    UNION ALL BY NAME
    SELECT 'link' AS kind, node, position, peer_position, link, nvlinks FROM links
    UNION ALL BY NAME
    SELECT * FROM spans
    UNION ALL BY NAME
    SELECT * FROM allocs
)
SELECT * FROM final ORDER BY kind, node, bucket_from, position, peer_position, start_ts, namespace, pod
