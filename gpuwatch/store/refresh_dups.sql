-- Nodes whose rows, staged without the duplicate merge (refresh_chunk.sql, dedup FALSE), hold one
-- (stream, ts) twice: a series row 0 s after the row before it in its series, two rows outside any
-- series at one time, or a row outside a series (no reading) at the time of one inside it (the same
-- pod's sample loaded with and without a reading). refresh() stages those nodes again with the merge.
WITH dup_streams AS (
    SELECT stream_id FROM stg_sample_rows WHERE in_series AND dt_seconds = 0
    UNION
    SELECT stream_id FROM stg_sample_rows WHERE NOT in_series GROUP BY stream_id, ts HAVING count(*) > 1
    UNION
    SELECT s.stream_id
    FROM stg_sample_rows s  -- probed against the few rows without a reading (the join's build side)
    SEMI JOIN (SELECT stream_id, ts FROM stg_sample_rows WHERE NOT in_series AND reported IS NULL) o
      ON s.stream_id = o.stream_id AND s.ts = o.ts
    WHERE s.in_series
)
SELECT DISTINCT node FROM stg_stream_aliases WHERE stream_id IN (SELECT stream_id FROM dup_streams) ORDER BY node;
