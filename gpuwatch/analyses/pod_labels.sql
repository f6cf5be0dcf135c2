-- Which pod labels the store knows (pods.labels), for grouping chargeback by any of them: each key and how many pods carry it.
-- params: (none)
-- columns: label, pods
-- Keys as the source wrote them (kube-state-metrics: its sanitised names, e.g. cost_center).
WITH keyed AS (
    SELECT unnest(json_keys(CAST(labels AS JSON))) AS label FROM stg_pods WHERE nullif(trim(labels), '') IS NOT NULL
),
final AS (
    SELECT label, count(*) AS pods FROM keyed GROUP BY label
)
SELECT * FROM final ORDER BY pods DESC, label
