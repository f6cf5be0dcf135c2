-- GPU pods the store believes are running at $as_of (used when the cluster is not consulted).
-- params: $as_of (timestamp)
-- columns: namespace, pod, pod_uid, owner_kind, owner_name, team, priority_class, gpu_count
SELECT namespace, pod, pod_uid, owner_kind, owner_name, team, priority_class, gpu_count
FROM stg_pods
WHERE (start_ts IS NULL OR start_ts <= $as_of) AND (end_ts IS NULL OR end_ts >= $as_of)
ORDER BY namespace, pod
