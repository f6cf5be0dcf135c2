-- Actions already taken, for the hourly rate limits: one row per owner, its first action in
-- [$since, $now]. Live: `acted` rows (each one a real write). Dry-run: `would_act` rows; an owner
-- that would have been stopped keeps showing up idle, so it counts once, from its first one.
-- params: $since, $now (timestamps), $dry_run (boolean)
-- columns: ts, team, owner_key
WITH final AS (
    SELECT min(ts) AS ts, any_value(team) AS team,
           namespace || '/' || owner_kind || '/' || owner_name AS owner_key
    FROM reclaim_audit
    WHERE ts >= $since AND ts <= $now
      AND ((NOT $dry_run AND decision = 'acted' AND result = 'ok')
           OR ($dry_run AND decision = 'would_act'))
    GROUP BY owner_key
)
SELECT * FROM final ORDER BY ts, owner_key
