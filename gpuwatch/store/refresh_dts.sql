-- Once every row is staged: per stream, how many series rows have each interval (stg_stream_dts).
INSERT INTO stg_stream_dts
SELECT stream_id, dt_seconds, count(*) AS n
FROM stg_sample_rows
WHERE in_series
GROUP BY stream_id, dt_seconds;
