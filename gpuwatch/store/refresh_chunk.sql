-- Stage one node range (staging.sql: every staging rule is per node, so ranges are independent).
INSERT INTO stg_sample_rows_stored
SELECT * FROM stg_sample_rows_for($node_lo, $node_hi, dedup := $dedup);
