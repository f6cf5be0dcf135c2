-- Write a load's re-staged rows (restage_rows) into the staged tables. The interval counts lose the
-- replaced rows' intervals and the next neighbours' old ones, and gain the new rows' and the next
-- neighbours' new ones; the staged rows in each touched range are replaced, and so are the neighbours
-- (deleted and inserted again with their new next_ fields, the row before the range, or dt_seconds and
-- prev_ fields, the row after it: an update would rewrite the columns of every row group it touches
-- when the store checkpoints; a delete marks rows, an insert appends).
CREATE OR REPLACE TEMP TABLE restage_neighbours AS
SELECT e.* EXCLUDE (is_prev) REPLACE (n.next_dt_seconds AS next_dt_seconds, n.next_reported AS next_reported,
                                      n.next_effective AS next_effective)
FROM restage_edge_rows e JOIN restage_rows n USING (stream_id, ts)
WHERE e.is_prev
UNION ALL
SELECT e.* EXCLUDE (is_prev) REPLACE (n.dt_seconds AS dt_seconds, n.prev_reported AS prev_reported,
                                      n.prev_effective AS prev_effective)
FROM restage_edge_rows e JOIN restage_rows n USING (stream_id, ts)
WHERE NOT e.is_prev;

CREATE OR REPLACE TEMP TABLE restage_dts AS
SELECT r.stream_id, r.dt_seconds, -count(*) AS n
FROM stg_sample_rows r JOIN restage_streams t USING (stream_id)
WHERE r.in_series AND r.ts BETWEEN t.lo AND t.hi
GROUP BY ALL
UNION ALL
SELECT stream_id, dt_seconds, -count(*) FROM restage_edge_rows WHERE NOT is_prev GROUP BY ALL
UNION ALL
SELECT n.stream_id, n.dt_seconds, count(*)
FROM restage_rows n JOIN restage_streams t USING (stream_id)
WHERE n.in_series AND n.ts BETWEEN t.lo AND t.hi
GROUP BY ALL
UNION ALL
SELECT n.stream_id, n.dt_seconds, count(*)
FROM restage_rows n JOIN restage_edge_rows e USING (stream_id, ts)
WHERE NOT e.is_prev
GROUP BY ALL;

CREATE OR REPLACE TABLE stg_stream_dts AS
SELECT stream_id, dt_seconds, CAST(sum(n) AS BIGINT) AS n
FROM (SELECT * FROM stg_stream_dts UNION ALL SELECT * FROM restage_dts)
GROUP BY stream_id, dt_seconds
HAVING sum(n) > 0;

DELETE FROM stg_sample_rows_stored r
USING (SELECT t.stream_id, t.lo, t.hi, e.prev_ts, e.next_ts
       FROM restage_streams t LEFT JOIN restage_edges e USING (stream_id)) x
WHERE r.stream_id = x.stream_id
  AND (r.ts BETWEEN x.lo AND x.hi OR (r.in_series AND (r.ts = x.prev_ts OR r.ts = x.next_ts)));

INSERT INTO stg_sample_rows_stored
SELECT n.* FROM restage_rows n JOIN restage_streams t USING (stream_id) WHERE n.ts BETWEEN t.lo AND t.hi
UNION ALL
SELECT * FROM restage_neighbours;
