-- What auto-reclaim did (or, in dry-run, would have done): the reclaim controller's audit log over the window.
-- params: $start, $end (timestamps, window [start, end))
-- columns: ts, run_id, decision, action, dry_run, namespace, pod, owner_kind, owner_name, team, reason, idle_since, gpu_count, usd_per_hour, recommendation_id, result, detail
-- Read-only view of the table the controller writes (store/schema.sql); newest first.
WITH final AS (
    SELECT ts, run_id, decision, action, dry_run, namespace, pod, owner_kind, owner_name, team, reason,
           idle_since, gpu_count, usd_per_hour, recommendation_id, result, detail
    FROM reclaim_audit
    WHERE ts >= $start AND ts < $end
)
SELECT * FROM final ORDER BY ts DESC, namespace, pod
