-- A full re-stage: rebuild the stream aliases from the samples' keys and empty the staged rows and
-- interval counts (refresh_chunk.sql then fills the rows a node range at a time; refresh_dts.sql counts
-- their intervals; refresh_streams.sql rebuilds the streams).
-- Rows are not sorted: analyses group and join, and a full sort of 20M rows costs more than it saves.
CREATE OR REPLACE TABLE stg_stream_aliases AS SELECT * FROM stg_stream_aliases_for($salt);
