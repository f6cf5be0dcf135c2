-- Stage one node range (staging.sql: every staging rule is per node, so ranges are independent).
INSERT INTO stg_samples
SELECT * FROM stg_samples_for($node_lo, $node_hi, dedup := $dedup);
