-- Which price applies to the fleet's GPUs, per model and price: the cluster's own price (per node
-- label where one applies), a dated list price, or none (unpriced: outside every team's cost and
-- reported as such, never $0). One row per (model, price, source).
-- params: (none)
-- columns: gpu_model, gpus, usd_per_gpu_hour, price_source
WITH final AS (
    SELECT gpu_model, count(*) AS gpus, usd_per_gpu_hour, price_source
    FROM stg_gpus
    GROUP BY gpu_model, usd_per_gpu_hour, price_source
)
SELECT * FROM final ORDER BY gpus DESC, gpu_model
