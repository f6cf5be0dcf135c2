-- reclaim_audit: every decision the reclaim controller makes; the app and report read it.
-- The one definition (reclaim/audit.py's COLUMNS name them): connect() runs it, and so does
-- store.ensure_reclaim_audit() for the controller on any DuckDB file.
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
