-- Prices: USD per GPU-hour per GPU model (and per "<model>/<MIG profile>" where priced apart), and
-- which source applies to each (the cluster's own price, or a dated list price).
-- params: (none)
-- columns: gpu_model, usd_per_gpu_hour, price_source
-- For recommendations.recommend(prices=...) in the app and the report, which run no SQL themselves.
-- Prices for a node label are left out here (recommendations price a repack by its model's plain price).
-- A price is matched to the GPUs by staging's rule (model_key: the whole name, case and surrounding
-- spaces ignored) and named as the devices spell the model, so a lookup by a finding's gpu_model
-- finds the price whatever case the price file used.
WITH plain AS (
    SELECT gpu_model, model_key, usd_per_gpu_hour, price_source FROM stg_prices WHERE node_label IS NULL
),
seen AS (
    SELECT DISTINCT gpu_model FROM stg_devices
),
final AS (
    SELECT coalesce(s.gpu_model, p.gpu_model) AS gpu_model, p.usd_per_gpu_hour, p.price_source
    FROM plain p LEFT JOIN seen s ON model_key(s.gpu_model) = p.model_key
)
SELECT * FROM final ORDER BY gpu_model
