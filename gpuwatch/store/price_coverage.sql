-- Which price applies to each GPU model in the fleet: the cluster's own price, a dated list price,
-- or none (unpriced: outside every team's cost and reported as such, never $0).
-- params: (none)
-- columns: gpu_model, gpus, usd_per_gpu_hour, price_source
WITH gpus AS (
    SELECT gpu_model, count(DISTINCT (node, gpu_uuid)) AS gpus
    FROM stg_devices
    WHERE mig_gi_id IS NULL
    GROUP BY gpu_model
),
final AS (
    SELECT g.gpu_model, g.gpus, p.usd_per_gpu_hour, coalesce(p.price_source, 'unpriced') AS price_source
    FROM gpus g LEFT JOIN stg_prices p ON p.model_key = model_key(g.gpu_model)
)
SELECT * FROM final ORDER BY gpus DESC, gpu_model
