-- Counterfactual: GPU-hours and dollars that dry-run `would_act` decisions would have reclaimed.
-- A dry-run pass that says `would_act` at ts means "stopped now"; the GPUs stay reclaimed for as
-- long as the next pass still sees the same idle run (its idle_since is not after ts: no activity
-- in between). So each would_act observation saves gpu_count x (next observation - ts); the last
-- one saves nothing (its future is unknown): a lower bound, at the resolution of the pass interval.
-- params: $start, $end (timestamps)
-- columns: namespace, owner_kind, owner_name, team, stops, gpu_hours, usd
WITH observations AS (
    -- one row per owner per pass (an owner-level action covers several pods)
    SELECT namespace, owner_kind, owner_name, ts,
           any_value(team) AS team,
           max(gpu_count) AS gpu_count,
           max(usd_per_hour) AS usd_per_hour,
           max(idle_since) AS idle_since,
           bool_or(decision = 'would_act') AS would_act
    FROM reclaim_audit
    WHERE dry_run AND ts >= $start AND ts < $end AND idle_since IS NOT NULL
    GROUP BY namespace, owner_kind, owner_name, ts
),
paired AS (
    SELECT *,
           lead(ts) OVER owner_passes AS next_ts,
           lead(idle_since) OVER owner_passes AS next_idle_since,
           lag(would_act) OVER owner_passes AS was_acting
    FROM observations
    WINDOW owner_passes AS (PARTITION BY namespace, owner_kind, owner_name ORDER BY ts)
),
saved AS (
    SELECT *,
           CASE WHEN would_act AND next_ts IS NOT NULL AND next_idle_since <= ts
                THEN (epoch(next_ts) - epoch(ts)) / 3600.0 ELSE 0 END AS hours
    FROM paired
),
final AS (
    SELECT namespace, owner_kind, owner_name, any_value(team) AS team,
           count(*) FILTER (WHERE would_act AND NOT coalesce(was_acting, FALSE)) AS stops,
           exact_sum(gpu_count * hours) AS gpu_hours,
           exact_sum(usd_per_hour * hours) AS usd
    FROM saved
    GROUP BY namespace, owner_kind, owner_name
    HAVING bool_or(would_act)
)
SELECT * FROM final ORDER BY usd DESC, namespace, owner_name
