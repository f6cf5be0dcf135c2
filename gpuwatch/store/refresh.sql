-- Materialise the staging logic (stg_samples_live) as the table every analysis reads. Not sorted:
-- analyses group and join, and a full sort of 20M rows costs more than it saves.
CREATE OR REPLACE TABLE stg_samples AS
SELECT * FROM stg_samples_live;
