-- Once every row is staged: each stream's series step (staging.sql, stg_stream_steps).
UPDATE stg_streams SET step_seconds = s.step_seconds
FROM stg_stream_steps() s
WHERE s.stream_id = stg_streams.stream_id;
