-- MIG fragmentation: per MIG GPU, the free memory slices no requested profile can use, and the cheapest repack.
-- params: $start, $end (timestamps: demand = MIG pods in [start, end); instances in use = at the window's end)
-- columns: node, gpu_uuid, gpu_model, free_slices, stranded_slices, stranded_fraction, instances, in_use, demand_mix, repack_layout, repack_moves, repack_fits, repack_stranded_slices, allocation_source, problem
--
-- The bundle cannot tie a pod's MIG UUID to (gpu_uuid, mig_gi_id), so "in use" comes from each
-- instance's last sample in the window (samples carry gpu_uuid + mig_gi_id + pod); where an
-- instance has no sample, the finisher falls back to the node's running pods per profile.
-- Three record kinds (instance | demand | running) share one shape; mig_fragmentation.py runs
-- the placement search (gpuwatch.mig) over them.
WITH instances AS (
    SELECT node, gpu_uuid, gpu_index, gpu_model, fb_total_bytes, mig_gi_id, mig_profile,
           mig_profile_id, mig_placement_start, mig_placement_size
    FROM stg_devices
    WHERE mig_gi_id IS NOT NULL
),
latest AS (
    -- each stream's latest sample in the window (counted by the integer stream id)
    SELECT stream_id, max(ts) AS last_ts FROM stg_sample_rows WHERE ts >= $start AND ts < $end GROUP BY stream_id
),
sampled AS (
    -- the latest sample per instance decides "in use"; at equal ts an attributed stream wins
    SELECT k.node, k.gpu_uuid, k.mig_gi_id,
           arg_max(k.pod IS NOT NULL, epoch_ms(l.last_ts) * 2 + (k.pod IS NOT NULL)::INT) AS in_use
    FROM latest l
    JOIN stg_streams k USING (stream_id)
    WHERE k.mig_gi_id IS NOT NULL
    GROUP BY k.node, k.gpu_uuid, k.mig_gi_id
),
mig_pods AS (
    -- a pod asking for n instances of a profile is n requests for a placement
    SELECT node, mig_profile, coalesce(gpu_count, 1) AS instances,
           start_ts < $end AND (end_ts IS NULL OR end_ts >= $end) AS running_at_end
    FROM stg_pods
    WHERE mig_profile IS NOT NULL AND start_ts < $end AND (end_ts IS NULL OR end_ts > $start)
),
final AS (
    SELECT 'instance' AS kind, i.node, i.gpu_uuid, i.gpu_index, i.gpu_model, i.fb_total_bytes,
           i.mig_gi_id, i.mig_profile, i.mig_profile_id, i.mig_placement_start, i.mig_placement_size,
           s.in_use, NULL::DOUBLE AS instances
    FROM instances i
    LEFT JOIN sampled s ON s.node = i.node AND s.gpu_uuid = i.gpu_uuid AND s.mig_gi_id = i.mig_gi_id
    UNION ALL
    SELECT 'demand', node, NULL, NULL, NULL, NULL, NULL, mig_profile, NULL, NULL, NULL, NULL, sum(instances)
    FROM mig_pods GROUP BY node, mig_profile
    UNION ALL
    SELECT 'running', node, NULL, NULL, NULL, NULL, NULL, mig_profile, NULL, NULL, NULL, NULL, sum(instances)
    FROM mig_pods WHERE running_at_end GROUP BY node, mig_profile
)
SELECT * FROM final
ORDER BY kind, node, gpu_uuid, mig_placement_start, mig_gi_id, mig_profile
