-- Once a node range's rows are staged: its streams' series step (staging.sql, stg_stream_steps).
UPDATE stg_streams SET step_seconds = s.step_seconds
FROM stg_stream_steps($node_lo, $node_hi) s
WHERE s.stream_id = stg_streams.stream_id;
