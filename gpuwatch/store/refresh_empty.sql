-- Before a full re-stage fills them: no staged rows, no interval counts.
CREATE OR REPLACE TABLE stg_sample_rows_stored AS SELECT * FROM stg_sample_rows_for(NULL, NULL) LIMIT 0;
CREATE OR REPLACE TABLE stg_stream_dts (stream_id BIGINT, dt_seconds DOUBLE, n BIGINT);
