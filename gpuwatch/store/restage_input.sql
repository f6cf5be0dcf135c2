-- The streams a load touched (every stream of a device it carried, old or new) with that device's range;
-- each one's series neighbours just outside the range, as staged (their next_/prev_ fields change, and
-- the new rows' prev_/next_ fields come from them); and the values to place in their series again: the
-- raw rows in the range, new and kept (restage_range.sql; staged by the same macro a full refresh uses),
-- plus the neighbours'.
CREATE OR REPLACE TEMP TABLE restage_streams AS
SELECT DISTINCT d.stream_id, c.lo, c.hi
FROM restage_delta d
JOIN restage_carried c
  ON d.node = c.node AND d.gpu_uuid = c.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id
UNION
SELECT a.stream_id, c.lo, c.hi
FROM stg_stream_aliases a
JOIN restage_carried c
  ON a.node = c.node AND a.gpu_uuid = c.gpu_uuid AND a.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id;

-- (found with their row ids in one scan of three columns, then fetched whole by row id: the table is
-- not written to before they are read)
CREATE OR REPLACE TEMP TABLE restage_edges AS
SELECT r.stream_id,
       max(r.ts) FILTER (WHERE r.ts < t.lo) AS prev_ts,
       min(r.ts) FILTER (WHERE r.ts > t.hi) AS next_ts,
       arg_max(r.rowid, r.ts) FILTER (WHERE r.ts < t.lo) AS prev_rowid,
       arg_min(r.rowid, r.ts) FILTER (WHERE r.ts > t.hi) AS next_rowid
FROM stg_sample_rows_stored r
JOIN restage_streams t USING (stream_id)
WHERE r.in_series
GROUP BY r.stream_id;

CREATE OR REPLACE TEMP TABLE restage_edge_rows AS
SELECT *
FROM stg_sample_rows_stored
WHERE rowid IN (SELECT prev_rowid FROM restage_edges UNION ALL SELECT next_rowid FROM restage_edges);

ALTER TABLE restage_edge_rows ADD COLUMN is_prev BOOLEAN;

UPDATE restage_edge_rows r SET is_prev = r.ts IS NOT DISTINCT FROM e.prev_ts
FROM restage_edges e WHERE r.stream_id = e.stream_id;

CREATE OR REPLACE TEMP TABLE restage_values AS
SELECT * FROM stg_sample_values(NULL, NULL, src := 'restage_range_readings')
UNION ALL BY NAME
SELECT * EXCLUDE (dt_seconds, next_dt_seconds, prev_reported, prev_effective, next_reported, next_effective, is_prev)
FROM restage_edge_rows;

CREATE OR REPLACE TEMP TABLE restage_rows AS
SELECT * FROM stg_sample_rows_of('restage_values');
