-- Who the GPU users are: each team (stg_pods.team: the pod's team label, else its namespace's team from the teams file, else its namespace) and its namespaces.
-- params: (none)
-- columns: team, namespace, pods
WITH final AS (
    SELECT team, namespace, count(*) AS pods
    FROM stg_pods
    GROUP BY ALL
)
SELECT * FROM final ORDER BY team, namespace
