-- The streams, rebuilt whole after every load (one row per stream): prices, teams, allocations and
-- series steps as they are now.
CREATE OR REPLACE TABLE stg_streams AS SELECT * FROM stg_streams_for();
