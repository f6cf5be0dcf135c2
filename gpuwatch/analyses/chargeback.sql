-- Chargeback: what each team's GPU allocations cost, split into productive, false-util, idle and unobserved time, plus the fleet's unallocated and stranded cost.
-- params: $start, $end (timestamps, window [start, end)), $idle_below (ratio), $false_reported_min (ratio), $false_effective_below (ratio), $group_by (a pod label key, '' = none); optional finisher param fragmentation (mig_fragmentation's frame, to reuse)
-- columns: kind, team, namespace, gpu_hours, cost_usd, productive_usd, false_util_usd, idle_usd, unobserved_usd, pods, share_of_fleet, fleet_cost_usd, group_value, cluster
-- cluster: in a store holding several clusters (ingest --cluster), the cluster of the row's namespace
-- ("<cluster>/<namespace>"); NULL otherwise and on the fleet-level rows.
-- $group_by: team rows are also split by the value of that pod label (pods.labels), `(no <key>)` where a
-- pod lacks it, in `group_value` (NULL when $group_by is ''): any label (cost center, project) groups the same money.
-- docs/architecture.md#finding-semantics. Team = the pod's team label, else its namespace's team (teams file), else its namespace. A pod's allocated cost is its
-- allocation time in the window (pods file) x its price (MIG: compute slices / 7 of the GPU unless a
-- "<model>/<profile>" price row exists; time-sliced: gpu_count), or its observed samples when the
-- pods file lacks it. Observed time splits into idle / false-util / productive (same tests as
-- idle_hoarding and false_utilization); allocated time without samples is `unobserved`.
-- Fleet cost = every GPU in the devices file x its price x the time it is known to exist in the window
-- (stg_gpu_presence: its samples, or allocations on it; docs/architecture.md#billing), never the whole
-- window for a GPU that was not there. This SQL yields per-team rows,
-- one `fleet` row and one `mig_free` row per MIG GPU (its uninstantiated capacity); chargeback.py
-- takes the stranded part of that from mig_fragmentation, leaves the rest unallocated, and rounds
-- every part to the cent with largest remainders so the parts sum exactly to the fleet cost.
-- Never a wrong dollar: a pod on a GPU whose model has no price is an `unpriced` row (GPU-hours,
-- no cost), not $0 inside its team; GPUs without a price are one `unpriced_capacity` row and are
-- outside the fleet cost; an allocation beyond the capacity it can hold was capped in staging, and
-- allocations that together claim more of one GPU (or of one MIG profile's instances on it) than it
-- holds are scaled down pro rata for the over-claimed time; either excess is an `over_allocated`
-- row (a data problem, not a charge); an allocation with no end
-- ends where its node's samples end (its last sample + its step), never past the data into the window's end.
WITH per_stream AS (
    -- count by the integer stream id first (a stream's samples share one step, share and price), from
    -- the hourly rollup's stored hours where current (store/rollup.sql: the same counts)
    SELECT stream_id, CAST(sum(series_n) AS BIGINT) AS samples,
           CAST(sum(series_idle_n) AS BIGINT) AS idle_n,
           CAST(sum(series_false_n) AS BIGINT) AS false_n,
           CAST(sum(series_productive_n) AS BIGINT) AS productive_n
    FROM stream_hours($start, $end, $idle_below, $false_reported_min, $false_effective_below)
    GROUP BY stream_id
    HAVING sum(series_n) > 0
),
observed AS (
    SELECT k.namespace, k.pod, any_value(k.team) AS team,
           coalesce(exact_sum(s.idle_n * k.step_seconds * k.usd_per_hour) / 3600.0, 0) AS idle_usd,
           coalesce(exact_sum(s.false_n * k.step_seconds * k.usd_per_hour) / 3600.0, 0) AS false_util_usd,
           coalesce(exact_sum(s.productive_n * k.step_seconds * k.usd_per_hour) / 3600.0, 0) AS productive_usd,
           coalesce(exact_sum(s.samples * k.step_seconds * k.usd_per_hour) / 3600.0, 0) AS observed_usd,
           exact_sum(s.samples * k.step_seconds * k.gpu_share) / 3600.0 AS observed_gpu_hours,
           bool_or(k.usd_per_hour IS NULL) AS observed_unpriced
    FROM per_stream s
    JOIN stg_streams k USING (stream_id)
    GROUP BY k.namespace, k.pod
),
stream_last AS (
    SELECT stream_id, max(ts) AS last_ts FROM stg_sample_rows GROUP BY stream_id
),
vanished AS (
    -- where each node's samples end (its last sample + the median step of its streams): its open allocations end there
    SELECT k.node, max(l.last_ts) + to_seconds(coalesce(median(k.step_seconds), 60.0)) AS last_ts
    FROM stream_last l JOIN stg_streams k USING (stream_id) GROUP BY k.node
),
window_part AS (
    -- the part of each allocation inside the window
    SELECT p.namespace, p.pod, p.team, p.usd_per_hour, p.gpu_equivalents, p.over_gpus, p.node, p.device_ids,
           p.device_count, p.mig_profile, p.slice_share, p.labels,
           epoch(greatest(coalesce(p.start_ts, $start::TIMESTAMP), $start::TIMESTAMP)) AS lo,
           epoch(least(coalesce(p.end_ts, v.last_ts, $end::TIMESTAMP), $end::TIMESTAMP)) AS hi
    FROM stg_pods p LEFT JOIN vanished v ON v.node = p.node
),
claims AS (
    -- each allocation's claim on each GPU it lists (a MIG pod's on its profile's instances of it)
    SELECT w.namespace, w.pod, w.node, trim(d.id) AS gpu_uuid, w.mig_profile, w.slice_share, w.lo, w.hi,
           w.gpu_equivalents / w.device_count AS rate
    FROM window_part w, unnest(string_split(w.device_ids, ',')) AS d(id)
    WHERE w.hi > w.lo AND w.gpu_equivalents > 0 AND nullif(trim(d.id), '') IS NOT NULL
),
instances AS (
    SELECT node, gpu_uuid, mig_profile, count(*) AS n FROM stg_devices WHERE mig_gi_id IS NOT NULL GROUP BY ALL
),
capacity AS (
    -- what one GPU holds at a time: 1 GPU; for a MIG profile, its instances there (unknown layout: the GPU)
    SELECT DISTINCT c.node, c.gpu_uuid, c.mig_profile,
           CASE WHEN c.mig_profile IS NULL OR i.n IS NULL THEN 1.0 ELSE i.n * c.slice_share END AS cap
    FROM claims c
    LEFT JOIN instances i ON i.node = c.node AND i.gpu_uuid = c.gpu_uuid AND i.mig_profile = c.mig_profile
),
load_steps AS (
    SELECT node, gpu_uuid, mig_profile, t, exact_sum(d) AS d
    FROM (SELECT node, gpu_uuid, mig_profile, lo AS t, rate AS d FROM claims
          UNION ALL SELECT node, gpu_uuid, mig_profile, hi, -rate FROM claims)
    GROUP BY ALL
),
load_segments AS (
    SELECT node, gpu_uuid, mig_profile, t AS s_lo,
           lead(t) OVER (PARTITION BY node, gpu_uuid, mig_profile ORDER BY t) AS s_hi,
           sum(d) OVER (PARTITION BY node, gpu_uuid, mig_profile ORDER BY t ROWS UNBOUNDED PRECEDING) AS load
    FROM load_steps
),
over_claimed AS (
    -- time during which a GPU's allocations claim more than it holds: each claim's excess share
    SELECT g.node, g.gpu_uuid, g.mig_profile, g.s_lo, g.s_hi, (g.load - c.cap) / g.load AS over_share
    FROM load_segments g
    JOIN capacity c ON c.node = g.node AND c.gpu_uuid = g.gpu_uuid AND c.mig_profile IS NOT DISTINCT FROM g.mig_profile
    WHERE g.s_hi IS NOT NULL AND g.load > c.cap + 1e-9
),
excess AS (
    SELECT c.namespace, c.pod,
           exact_sum(c.rate * (least(c.hi, o.s_hi) - greatest(c.lo, o.s_lo)) * o.over_share) AS excess_gpu_seconds
    FROM claims c
    JOIN over_claimed o ON o.node = c.node AND o.gpu_uuid = c.gpu_uuid
         AND o.mig_profile IS NOT DISTINCT FROM c.mig_profile AND o.s_lo < c.hi AND o.s_hi > c.lo
    GROUP BY ALL
),
allocated AS (
    -- ``keep``: the share of the allocation its GPUs could hold (over-claimed time is split
    -- pro rata among the claims; the excess is reported as over_allocated, never charged)
    SELECT w.namespace, w.pod, w.team, w.usd_per_hour, w.gpu_equivalents, w.over_gpus, w.labels,
           greatest(w.hi - w.lo, 0) AS seconds, coalesce(e.excess_gpu_seconds, 0) AS excess_gpu_seconds,
           CASE WHEN e.excess_gpu_seconds IS NULL THEN 1.0
                ELSE greatest(1.0 - e.excess_gpu_seconds / ((w.hi - w.lo) * w.gpu_equivalents), 0.0) END AS keep
    FROM window_part w LEFT JOIN excess e ON e.namespace = w.namespace AND e.pod = w.pod
),
per_pod AS (
    SELECT coalesce(a.namespace, o.namespace) AS namespace,
           coalesce(a.team, o.team, coalesce(a.namespace, o.namespace)) AS team,
           coalesce(a.keep, 1.0) * greatest(coalesce(a.seconds * a.gpu_equivalents / 3600.0, 0), coalesce(o.observed_gpu_hours, 0))
               AS gpu_hours,
           coalesce(a.keep, 1.0) * greatest(coalesce(a.seconds * a.usd_per_hour / 3600.0, 0), coalesce(o.observed_usd, 0)) AS allocated_usd,
           coalesce(a.keep, 1.0) * coalesce(o.productive_usd, 0) AS productive_usd, coalesce(a.keep, 1.0) * coalesce(o.false_util_usd, 0) AS false_util_usd,
           coalesce(a.keep, 1.0) * coalesce(o.idle_usd, 0) AS idle_usd, coalesce(a.keep, 1.0) * coalesce(o.observed_usd, 0) AS observed_usd,
           (a.pod IS NOT NULL AND a.usd_per_hour IS NULL) OR coalesce(o.observed_unpriced, FALSE) AS unpriced,
           coalesce(a.seconds * a.over_gpus / 3600.0, 0) + coalesce(a.excess_gpu_seconds / 3600.0, 0) AS over_gpu_hours,
           CASE WHEN $group_by <> ''
                THEN coalesce(CAST(a.labels AS JSON) ->> $group_by, '(no ' || $group_by || ')') END
               AS group_value
    FROM allocated a
    FULL OUTER JOIN observed o ON o.namespace = a.namespace AND o.pod = a.pod
    WHERE coalesce(a.seconds, 0) > 0 OR o.pod IS NOT NULL
),
teams AS (
    -- each pod's parts rounded to the cent once (usd_cents: as idle_hoarding and false_utilization round
    -- the same pod's figures), so a team's parts are sums of its pods' cents whatever the grouping
    SELECT CASE WHEN unpriced THEN 'unpriced' ELSE 'team' END AS kind, team, namespace, exact_sum(gpu_hours) AS gpu_hours,
           exact_sum(usd_cents(productive_usd)) AS productive_usd, exact_sum(usd_cents(false_util_usd)) AS false_util_usd,
           exact_sum(usd_cents(idle_usd)) AS idle_usd,
           exact_sum(usd_cents(allocated_usd - observed_usd)) AS unobserved_usd, count(*) AS pods,
           CAST(NULL AS VARCHAR) AS node, CAST(NULL AS VARCHAR) AS gpu_uuid, CAST(NULL AS DOUBLE) AS amount_usd,
           group_value, cluster_of(namespace) AS cluster
    FROM per_pod
    GROUP BY unpriced, team, namespace, group_value
),
over_allocated AS (
    SELECT 'over_allocated' AS kind, team, namespace, exact_sum(over_gpu_hours), 0.0, 0.0, 0.0, 0.0, count(*),
           NULL, NULL, NULL, group_value, cluster_of(namespace)
    FROM per_pod WHERE over_gpu_hours > 0
    GROUP BY team, namespace, group_value
),
present AS (
    SELECT node, gpu_uuid, sum(hi_s - lo_s) / 3600.0 AS hours FROM stg_gpu_presence($start, $end) GROUP BY ALL
),
priced AS (
    -- each GPU over the time it is known to exist in the window (stg_gpu_presence), not the whole window
    SELECT g.*, g.usd_per_gpu_hour * p.hours AS window_usd, p.hours AS window_hours
    FROM stg_gpus g JOIN present p USING (node, gpu_uuid)
),
fleet AS (
    SELECT 'fleet' AS kind, NULL AS team, NULL AS namespace, exact_sum(CASE WHEN window_usd IS NOT NULL THEN window_hours END),
           0.0, 0.0, 0.0, 0.0, count(*) AS pods, NULL, NULL, coalesce(exact_sum(window_usd), 0) AS amount_usd, NULL AS group_value,
           NULL AS cluster
    FROM priced
),
unpriced_capacity AS (
    SELECT 'unpriced_capacity' AS kind, NULL, NULL, exact_sum(window_hours), 0.0, 0.0, 0.0, 0.0, count(*),
           NULL, NULL, NULL, NULL, NULL
    FROM priced WHERE window_usd IS NULL HAVING count(*) > 0
),
mig_free AS (
    -- a MIG GPU's capacity that no instance holds (GPU price minus its instances' prices)
    -- (its GPU-hours: that amount at the GPU's price)
    SELECT 'mig_free' AS kind, NULL, NULL,
           greatest(window_usd - coalesce(instances_usd_per_hour, 0) * window_hours, 0) / nullif(usd_per_gpu_hour, 0),
           0.0, 0.0, 0.0, 0.0, 0, node, gpu_uuid,
           greatest(window_usd - coalesce(instances_usd_per_hour, 0) * window_hours, 0) AS amount_usd, NULL, NULL
    FROM priced WHERE mig
),
final AS (
    SELECT * FROM teams
    UNION ALL SELECT * FROM over_allocated
    UNION ALL SELECT * FROM fleet
    UNION ALL SELECT * FROM unpriced_capacity
    UNION ALL SELECT * FROM mig_free
)
SELECT * FROM final ORDER BY kind DESC, team, namespace, group_value, node, gpu_uuid
