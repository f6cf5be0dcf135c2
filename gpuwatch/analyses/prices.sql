-- Prices: USD per GPU-hour per GPU model (and per "<model>/<MIG profile>" where priced apart), and
-- which source applies to each (the cluster's own price, or a dated list price).
-- params: (none)
-- columns: gpu_model, usd_per_gpu_hour, price_source
-- For recommendations.recommend(prices=...) in the app and the report, which run no SQL themselves.
-- Prices for a node label are left out here (recommendations price a repack by its model's plain price).
WITH final AS (
    SELECT gpu_model, usd_per_gpu_hour, price_source FROM stg_prices WHERE node_label IS NULL
)
SELECT * FROM final ORDER BY gpu_model
