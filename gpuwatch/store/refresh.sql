-- Rebuild the streams from the samples' keys and empty the staged rows (refresh_chunk.sql then
-- fills them a node range at a time; refresh_steps.sql completes the streams).
-- Rows are not sorted: analyses group and join, and a full sort of 20M rows costs more than it saves.
CREATE OR REPLACE TABLE stg_stream_aliases AS SELECT * FROM stg_stream_aliases_for();
CREATE OR REPLACE TABLE stg_streams AS SELECT * FROM stg_streams_for();
CREATE OR REPLACE TABLE stg_sample_rows AS SELECT * FROM stg_sample_rows_for(NULL, NULL) LIMIT 0;
