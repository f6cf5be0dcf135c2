-- The fleet's GPUs: each physical GPU with its node, index, model, MIG instances and price, for pickers and drill-downs.
-- params: (none)
-- columns: node, gpu_uuid, gpu_index, gpu_model, mig, instances, usd_per_gpu_hour
-- From stg_gpus (the fleet every page counts) and stg_devices (index, instance count); a NULL price is unpriced.
WITH devices AS (
    SELECT node, gpu_uuid, min(gpu_index) AS gpu_index, count(*) FILTER (WHERE mig_gi_id IS NOT NULL) AS instances
    FROM stg_devices
    GROUP BY node, gpu_uuid
),
final AS (
    SELECT g.node, g.gpu_uuid, d.gpu_index, g.gpu_model, g.mig, d.instances, g.usd_per_gpu_hour
    FROM stg_gpus g JOIN devices d USING (node, gpu_uuid)
)
SELECT * FROM final ORDER BY node, gpu_index NULLS LAST, gpu_uuid
