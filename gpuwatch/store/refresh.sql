-- Empty the materialised staging table (refresh_chunk.sql then fills it a node range at a time).
-- Not sorted: analyses group and join, and a full sort of 20M rows costs more than it saves.
CREATE OR REPLACE TABLE stg_samples AS
SELECT * FROM stg_samples_for(NULL, NULL) LIMIT 0;
