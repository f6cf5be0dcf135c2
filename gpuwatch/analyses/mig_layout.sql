-- MIG slice map: every MIG GPU's 8 memory slices, now and after the suggested repack (in use / idle instance / free / stranded).
-- params: $start, $end (timestamps, window [start, end); the layout is the window's end, as in mig_fragmentation); optional finisher param fragmentation (mig_fragmentation's frame, to reuse)
-- columns: node, gpu_uuid, gpu_model, layout, slice, state, instance, label, namespace, pod, moved_from, gpu_index
-- The SQL lists each MIG instance with the pod on its last sample in the window; mig_layout.py
-- expands them to slices and takes in-use, stranded and the repack from mig_fragmentation, so
-- the map and the fragmentation table always agree.
WITH instances AS (
    SELECT node, gpu_uuid, gpu_index, gpu_model, fb_total_bytes, mig_gi_id, mig_profile, mig_profile_id,
           mig_placement_start, mig_placement_size
    FROM stg_devices
    WHERE mig_gi_id IS NOT NULL
),
latest AS (
    SELECT stream_id, max(ts) AS last_ts FROM stg_sample_rows WHERE ts >= $start AND ts < $end GROUP BY stream_id
),
last_pod AS (
    -- a struct is never NULL, so an instance free at its last sample reads as free; streams ending at the
    -- same sample are ordered by namespace and pod, so the answer never depends on scan order
    SELECT k.node, k.gpu_uuid, k.mig_gi_id, arg_max({'namespace': k.namespace, 'pod': k.pod}, {'t': l.last_ts, 'ns': k.namespace, 'pod': k.pod}) AS occupant
    FROM latest l
    JOIN stg_streams k USING (stream_id)
    WHERE k.mig_gi_id IS NOT NULL
    GROUP BY k.node, k.gpu_uuid, k.mig_gi_id
),
final AS (
    SELECT i.*, p.occupant.namespace AS namespace, p.occupant.pod AS pod
    FROM instances i
    LEFT JOIN last_pod p ON p.node = i.node AND p.gpu_uuid = i.gpu_uuid AND p.mig_gi_id = i.mig_gi_id
)
SELECT * FROM final ORDER BY node, gpu_index, mig_placement_start
