-- Hourly rollup: per stream and clock hour, the counts and exact sums the window analyses add up
-- (utilization's means, chargeback's idle / false-util / productive samples, fleet_timeseries' buckets,
-- the per-stream counts of idle_hoarding, false_utilization and rightsizing; over every row, series or
-- not: orphaned_memory's most memory held and last row (to find the few GPUs worth its scan) and
-- topology_placement's NVLink traffic).
-- docs/architecture.md#rollup. Every column is a count, a max or an exact part (a DECIMAL sum of values
-- rounded to 12 decimals, exact_part), so adding the hours of a window gives, bit for bit, what one
-- pass over the window's rows gives: an analysis reads the stored hours inside its window and the rows
-- of the partial hours at its edges. Idle and false-util counts depend on thresholds: the rollup holds
-- them for the thresholds in rollup_meta; other thresholds (and a rollup older than the last load) read
-- the rows. Per-stream constants (share, price, pod, team) are joined at read time, so a load of prices,
-- teams, devices or pods changes no stored hour; a load of samples makes the hours it replaced stale, and
-- store/rollup.py's update() recomputes just those (the analyze step runs it).

-- One pass over the staged rows with lo <= ts < hi, by stream and hour.
CREATE OR REPLACE MACRO rollup_parts(lo, hi, idle_below, false_min, false_below) AS TABLE
WITH judged AS (
    SELECT stream_id, ts, date_trunc('hour', ts) AS hour, in_series, reported, effective, gpu_util,
           gr_engine_active, sm_active, tensor_active, fb_used_bytes, nvlink_tx_bytes_per_second,
           nvlink_rx_bytes_per_second,
           is_idle(reported, effective, idle_below) AS idle,
           is_false_util(reported, effective, false_min, false_below) AS is_false
    FROM stg_sample_rows
    WHERE ts >= lo AND ts < hi
)
SELECT stream_id, hour,
       count(*) AS rows_n,
       count(*) FILTER (WHERE idle) AS idle_n,
       count(*) FILTER (WHERE NOT idle) AS busy_n,
       exact_part(reported) AS reported_part, count(reported) AS reported_n,
       exact_part(effective) AS effective_part, count(effective) AS effective_n,
       count(*) FILTER (WHERE in_series) AS series_n,
       count(*) FILTER (WHERE in_series AND idle) AS series_idle_n,
       count(*) FILTER (WHERE in_series AND NOT idle) AS series_busy_n,
       max(CASE WHEN in_series AND idle THEN fb_used_bytes END) AS series_idle_max_fb,
       max(CASE WHEN in_series THEN ts END) AS series_last_ts,
       count(*) FILTER (WHERE in_series AND is_false) AS series_false_n,
       count(*) FILTER (WHERE in_series AND NOT idle AND NOT is_false) AS series_productive_n,
       exact_part(CASE WHEN in_series AND is_false THEN reported - effective END) AS series_false_gap_part,
       exact_part(CASE WHEN in_series AND effective IS NOT NULL THEN reported END) AS series_known_reported_part,
       exact_part(CASE WHEN in_series THEN gpu_util END) AS gpu_util_part,
       count(CASE WHEN in_series THEN gpu_util END) AS gpu_util_n,
       exact_part(CASE WHEN in_series THEN gr_engine_active END) AS gr_part,
       count(CASE WHEN in_series THEN gr_engine_active END) AS gr_n,
       exact_part(CASE WHEN in_series THEN sm_active END) AS sm_part,
       count(CASE WHEN in_series THEN sm_active END) AS sm_n,
       exact_part(CASE WHEN in_series THEN tensor_active END) AS tensor_part,
       count(CASE WHEN in_series THEN tensor_active END) AS tensor_n,
       max(CASE WHEN in_series THEN fb_used_bytes END) AS max_fb_used_bytes,
       max(fb_used_bytes) AS rows_max_fb_used_bytes, max(ts) AS rows_last_ts,
       exact_part(nvlink_tx_bytes_per_second + nvlink_rx_bytes_per_second) AS rows_nvlink_part,
       count(nvlink_tx_bytes_per_second + nvlink_rx_bytes_per_second) AS rows_nvlink_n,
       exact_part(CASE WHEN in_series THEN reported END) AS series_reported_part,
       count(CASE WHEN in_series THEN reported END) AS series_reported_n,
       exact_part(CASE WHEN in_series THEN effective END) AS series_effective_part,
       count(CASE WHEN in_series THEN effective END) AS series_effective_n
FROM judged
GROUP BY stream_id, hour;

CREATE TABLE IF NOT EXISTS rollup_stream_hours AS
SELECT * FROM rollup_parts(NULL::TIMESTAMP, NULL::TIMESTAMP, NULL::DOUBLE, NULL::DOUBLE, NULL::DOUBLE) LIMIT 0;

-- What the stored hours were computed for: the staging SQL and stream salt (stream ids), the load they
-- include (ingest_log rows), the thresholds of their idle and false-util counts.
CREATE TABLE IF NOT EXISTS rollup_meta (staging VARCHAR, salt VARCHAR, log_rows BIGINT, idle_below DOUBLE,
                                        false_reported_min DOUBLE, false_effective_below DOUBLE);

-- True when the stored hours are those of the staged rows as they are now, counted with these thresholds
-- (a NULL threshold: the reader does not use that count).
CREATE OR REPLACE MACRO rollup_current(want_idle, want_min, want_below) AS (
    SELECT count(*) > 0 FROM rollup_meta m
    WHERE m.staging = (SELECT value FROM store_meta WHERE key = 'staging')
      AND m.salt = CAST(stg_stream_salt() AS VARCHAR)
      AND m.log_rows = (SELECT count(*) FROM ingest_log)
      AND (want_idle IS NULL OR m.idle_below = want_idle)
      AND (want_min IS NULL OR m.false_reported_min = want_min)
      AND (want_below IS NULL OR m.false_effective_below = want_below));

-- The whole clock hours inside [lo, hi): [rollup_inner_lo, rollup_inner_hi) (empty when none).
CREATE OR REPLACE MACRO rollup_inner_lo(lo, hi) AS
    least(CASE WHEN date_trunc('hour', lo) = lo THEN lo ELSE date_trunc('hour', lo) + INTERVAL 1 HOUR END, hi);
CREATE OR REPLACE MACRO rollup_inner_hi(lo, hi) AS greatest(rollup_inner_lo(lo, hi), date_trunc('hour', hi));

-- True when buckets of this length starting at ``start`` are made of whole clock hours.
CREATE OR REPLACE MACRO rollup_hour_buckets(start, bucket_seconds) AS
    epoch(start) % 3600 = 0 AND bucket_seconds % 3600 = 0;

-- The stored hours inside the window [lo, hi) when they are current for these thresholds (none
-- otherwise), and the rows to read instead: [lo, rollup_rows_before) and [rollup_rows_after, hi) (the
-- partial edge hours; all of the window when the hours are not current).
CREATE OR REPLACE MACRO rollup_hours(lo, hi, idle_below, false_min, false_below) AS TABLE
SELECT r.* FROM rollup_stream_hours r
WHERE rollup_current(idle_below, false_min, false_below)
  AND r.hour >= rollup_inner_lo(lo::TIMESTAMP, hi::TIMESTAMP) AND r.hour < rollup_inner_hi(lo::TIMESTAMP, hi::TIMESTAMP);
CREATE OR REPLACE MACRO rollup_rows_before(lo, hi, idle_below, false_min, false_below) AS
    CASE WHEN rollup_current(idle_below, false_min, false_below)
         THEN rollup_inner_lo(lo::TIMESTAMP, hi::TIMESTAMP) ELSE hi::TIMESTAMP END;
CREATE OR REPLACE MACRO rollup_rows_after(lo, hi, idle_below, false_min, false_below) AS
    CASE WHEN rollup_current(idle_below, false_min, false_below)
         THEN rollup_inner_hi(lo::TIMESTAMP, hi::TIMESTAMP) ELSE hi::TIMESTAMP END;

-- The window [lo, hi) by stream and hour: stored hours when they are current, rows otherwise and at
-- the window's partial edge hours. Sum a column over a stream's hours for its window total.
CREATE OR REPLACE MACRO stream_hours(lo, hi, idle_below, false_min, false_below) AS TABLE
SELECT * FROM rollup_hours(lo, hi, idle_below, false_min, false_below)
UNION ALL
SELECT * FROM rollup_parts(lo::TIMESTAMP, rollup_rows_before(lo, hi, idle_below, false_min, false_below),
                           idle_below, false_min, false_below)
UNION ALL
SELECT * FROM rollup_parts(rollup_rows_after(lo, hi, idle_below, false_min, false_below), hi::TIMESTAMP,
                           idle_below, false_min, false_below);
