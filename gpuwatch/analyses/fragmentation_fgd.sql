-- GPU fragmentation (FGD, Weng et al. ATC'23): per node, the free GPU share the window's task mix cannot use.
-- params: $start, $end (timestamps: task mix = non-MIG GPU pods in [start, end); free shares at the window's end)
-- columns: node, gpu_model, gpus, free_gpu_share, fragmented_gpu_share, fragmentation_ratio
--
-- Whole and time-sliced GPUs only (MIG GPUs: see mig_fragmentation). Shares are in milli-GPU, as in
-- the paper's simulator, so "R_g >= d" compares integers. Two record kinds share one shape:
-- gpu (its allocated share at the end) and task (a task type and how many pods had it);
-- fragmentation_fgd.py computes F_n. A device id is a GPU UUID, or an index on the pod's node.
WITH gpus AS (
    SELECT node, gpu_uuid, gpu_index, gpu_model
    FROM stg_devices
    WHERE mig_gi_id IS NULL
      AND gpu_uuid NOT IN (SELECT gpu_uuid FROM stg_devices WHERE mig_gi_id IS NOT NULL)
),
window_pods AS (
    SELECT namespace, pod, node, gpu_count,
           list_filter(string_split(coalesce(device_ids, ''), ','), lambda x: trim(x) <> '') AS ids,
           start_ts < $end AND (end_ts IS NULL OR end_ts >= $end) AS running_at_end
    FROM stg_pods
    WHERE mig_profile IS NULL AND gpu_count > 0
      AND start_ts < $end AND (end_ts IS NULL OR end_ts > $start)
),
claims AS (
    -- a pod's gpu_count spread evenly over its device ids (time-sliced: 0.25 of one GPU)
    SELECT p.node, trim(unnest(p.ids)) AS device_id, p.gpu_count / len(p.ids) AS share
    FROM window_pods p
    WHERE p.running_at_end AND len(p.ids) > 0
),
resolved AS (
    -- index ids ("0") name a GPU on the pod's node; anything else is a GPU UUID
    SELECT coalesce(g.gpu_uuid, c.device_id) AS gpu_uuid, c.share
    FROM claims c
    LEFT JOIN gpus g ON g.node = c.node AND CAST(g.gpu_index AS VARCHAR) = c.device_id
),
allocated AS (
    SELECT g.node, g.gpu_uuid, g.gpu_model, coalesce(exact_sum(r.share), 0) AS share
    FROM gpus g
    LEFT JOIN resolved r ON r.gpu_uuid = g.gpu_uuid
    GROUP BY g.node, g.gpu_uuid, g.gpu_model
),
sized AS (
    -- k GPUs: the device ids, or the whole GPUs gpu_count implies when the ids are missing
    SELECT gpu_count, greatest(len(ids), CAST(ceil(gpu_count) AS INTEGER)) AS k FROM window_pods
),
task_types AS (
    -- k GPUs of d milli-GPU each; a whole-GPU task has d = 1000; the bundle has no GPU-type constraint
    SELECT k, least(1000, CAST(round(1000 * gpu_count / k) AS INTEGER)) AS d, count(*) AS pods
    FROM sized
    GROUP BY k, d
),
final AS (
    SELECT 'gpu' AS kind, node, gpu_uuid, gpu_model,
           greatest(0, 1000 - CAST(round(1000 * share) AS INTEGER)) AS free_milli,
           NULL::INTEGER AS k, NULL::INTEGER AS d, NULL::BIGINT AS pods
    FROM allocated
    UNION ALL
    SELECT 'task', NULL, NULL, NULL, NULL, k, d, pods FROM task_types
)
SELECT * FROM final
ORDER BY kind, node, gpu_uuid, k, d
