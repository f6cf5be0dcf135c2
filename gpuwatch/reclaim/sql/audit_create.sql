-- reclaim_audit: every decision the reclaim controller makes (contracts.md fixes the columns).
-- store/schema.sql creates the same table; this file lets the controller run on any DuckDB file.
CREATE TABLE IF NOT EXISTS reclaim_audit (
    ts TIMESTAMP,
    run_id VARCHAR,
    decision VARCHAR,
    action VARCHAR,
    dry_run BOOLEAN,
    namespace VARCHAR,
    pod VARCHAR,
    owner_kind VARCHAR,
    owner_name VARCHAR,
    team VARCHAR,
    reason VARCHAR,
    idle_since TIMESTAMP,
    gpu_count DOUBLE,
    usd_per_hour DOUBLE,
    recommendation_id VARCHAR,
    result VARCHAR,
    detail VARCHAR
);
