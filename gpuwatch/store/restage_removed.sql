-- Before a re-staged load replaces them: the key of every stored reading it replaces (the aliases'
-- counts lose them; restage_carried.sql has the timestamps, replace_series.sql the same rule).
CREATE OR REPLACE TEMP TABLE restage_removed AS
SELECT r.key_id
FROM sample_readings r
JOIN restage_carried_keys c ON r.key_id = c.key_id AND r.ts BETWEEN c.lo AND c.hi
JOIN restage_carried_ts t ON t.device = c.device AND t.ts = r.ts
WHERE r.ts BETWEEN (SELECT min(lo) FROM restage_carried) AND (SELECT max(hi) FROM restage_carried);
