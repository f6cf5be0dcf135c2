-- Append the registered frame `audit_rows` (same columns, any order) to reclaim_audit.
INSERT INTO reclaim_audit BY NAME SELECT * FROM audit_rows;
