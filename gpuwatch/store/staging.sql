-- Staging: the ONLY place units, names and duplicates change (dbt-style stg_* over raw tables).
-- Analyses read stg_* (and reclaim_audit) only. Statements are separated by ";\n\n" lines.

-- Prices: one per model (or "<model>/<mig profile>"); names trimmed; negative/NaN prices dropped.
CREATE OR REPLACE VIEW stg_prices AS
WITH raw AS (
    SELECT trim(gpu_model) AS gpu_model, usd_per_gpu_hour FROM prices
    WHERE isfinite(usd_per_gpu_hour) AND usd_per_gpu_hour >= 0
),
final AS (
    SELECT gpu_model, max(usd_per_gpu_hour) AS usd_per_gpu_hour FROM raw GROUP BY gpu_model
)
SELECT * FROM final;

-- Devices: one row per GPU and per MIG instance, with its share of the GPU and its price.
CREATE OR REPLACE VIEW stg_devices AS
WITH raw AS (
    SELECT DISTINCT ON (node, gpu_uuid, mig_gi_id) * FROM devices
),
sized AS (
    -- compute slices keyed on the profile id (DESIGN §6); the name ("3g.40gb", "1c.3g.71gb") is the fallback
    SELECT *, coalesce(
        CASE mig_profile_id WHEN 19 THEN 1 WHEN 20 THEN 1 WHEN 15 THEN 1 WHEN 14 THEN 2
                            WHEN 9 THEN 3 WHEN 5 THEN 4 WHEN 0 THEN 7 END,
        TRY_CAST(regexp_extract(mig_profile, '(\d+)g\.', 1) AS INTEGER)) AS compute_slices
    FROM raw
),
final AS (
    SELECT s.*,
           s.gpu_uuid || coalesce('/' || s.mig_gi_id, '') AS device_key,
           -- a MIG instance is its compute slices / 7 of the GPU (DESIGN §3)
           CASE WHEN s.mig_gi_id IS NULL THEN 1.0 ELSE s.compute_slices / 7.0 END AS gpu_share,
           CASE WHEN s.mig_gi_id IS NULL THEN mp.usd_per_gpu_hour
                ELSE coalesce(pp.usd_per_gpu_hour, mp.usd_per_gpu_hour * s.compute_slices / 7.0) END AS usd_per_hour
    FROM sized s
    LEFT JOIN stg_prices mp ON mp.gpu_model = s.gpu_model
    LEFT JOIN stg_prices pp ON pp.gpu_model = s.gpu_model || '/' || s.mig_profile
)
SELECT * FROM final;

-- Pods: one allocation per (namespace, pod) (the latest start wins), its team and what it costs.
CREATE OR REPLACE VIEW stg_pods AS
WITH raw AS (
    SELECT DISTINCT ON (namespace, pod) * FROM pods ORDER BY namespace, pod, start_ts DESC NULLS LAST
),
node_model AS (
    SELECT node, min(gpu_model) AS gpu_model FROM stg_devices GROUP BY node
),
shaped AS (
    SELECT r.* EXCLUDE (team),
           -- chargeback key: the pod's `team` label, else its namespace (DESIGN §5)
           coalesce(nullif(trim(r.team), ''), r.namespace) AS team,
           greatest(coalesce(len(string_split(nullif(r.device_ids, ''), ',')), 0), 1) AS device_count,
           nullif(regexp_extract(r.gpu_resource, 'mig-(.+)$', 1), '') AS mig_profile,
           nm.gpu_model
    FROM raw r LEFT JOIN node_model nm ON nm.node = r.node
),
final AS (
    SELECT s.*,
           CASE WHEN s.mig_profile IS NULL THEN 1.0
                ELSE TRY_CAST(regexp_extract(s.mig_profile, '(\d+)g\.', 1) AS INTEGER) / 7.0 END AS slice_share,
           -- whole-GPU equivalents: a time-sliced pod's fractional gpu_count, a MIG pod's slices / 7
           s.gpu_count * slice_share AS gpu_equivalents,
           s.gpu_count * CASE WHEN s.mig_profile IS NULL THEN mp.usd_per_gpu_hour
                              ELSE coalesce(pp.usd_per_gpu_hour, mp.usd_per_gpu_hour * slice_share) END AS usd_per_hour
    FROM shaped s
    LEFT JOIN stg_prices mp ON mp.gpu_model = s.gpu_model
    LEFT JOIN stg_prices pp ON pp.gpu_model = s.gpu_model || '/' || s.mig_profile
)
SELECT * FROM final;

-- Samples: clean values, one row per (ts, device, pod), units as ratios 0-1, share and price attached,
-- and each row's place in its series (DESIGN §5). This is the logic; store.refresh() materialises it
-- as the table stg_samples after every load, because every analysis scans it (20M+ rows).
-- Every rule here is per node (dedup keys, series and the percent judgement all include the node), so
-- the macro takes a node range [node_lo, node_hi] (NULL = open): refresh() runs it a few nodes at a time,
-- keeping each window sort in memory, and the result is the same as one pass over every node.
-- dedup := FALSE skips the duplicate merge; only for a range refresh() has checked has no duplicates.
CREATE OR REPLACE MACRO stg_samples_for(node_lo, node_hi, dedup := TRUE) AS TABLE
WITH cleaned AS NOT MATERIALIZED (
    -- NaN, ±inf and negative readings are missing, never 0; negative rates are counter resets
    SELECT ts, node, gpu_uuid, mig_gi_id,
           nullif(trim(namespace), '') AS namespace, nullif(trim(pod), '') AS pod,
           nullif(trim(container), '') AS container,
           CASE WHEN isfinite(gpu_util) AND gpu_util >= 0 THEN gpu_util END AS gpu_util,
           CASE WHEN isfinite(gr_engine_active) AND gr_engine_active >= 0 THEN gr_engine_active END AS gr_engine_active,
           CASE WHEN isfinite(sm_active) AND sm_active >= 0 THEN sm_active END AS sm_active,
           CASE WHEN isfinite(sm_occupancy) AND sm_occupancy >= 0 THEN sm_occupancy END AS sm_occupancy,
           CASE WHEN isfinite(tensor_active) AND tensor_active >= 0 THEN tensor_active END AS tensor_active,
           CASE WHEN isfinite(dram_active) AND dram_active >= 0 THEN dram_active END AS dram_active,
           CASE WHEN isfinite(fb_used_bytes) AND fb_used_bytes >= 0 THEN fb_used_bytes END AS fb_used_bytes,
           CASE WHEN isfinite(power_watts) AND power_watts >= 0 THEN power_watts END AS power_watts,
           CASE WHEN isfinite(nvlink_tx_bytes_per_second) AND nvlink_tx_bytes_per_second >= 0
                THEN nvlink_tx_bytes_per_second END AS nvlink_tx_bytes_per_second,
           CASE WHEN isfinite(nvlink_rx_bytes_per_second) AND nvlink_rx_bytes_per_second >= 0
                THEN nvlink_rx_bytes_per_second END AS nvlink_rx_bytes_per_second
    FROM samples
    WHERE (node_lo IS NULL OR node >= node_lo) AND (node_hi IS NULL OR node <= node_hi)
),
deduped AS (
    -- the same (ts, device, pod) loaded twice is one sample; max() keeps a known value over NULL
    SELECT ts, node, gpu_uuid, mig_gi_id, namespace, pod, max(container) AS container,
           max(gpu_util) AS gpu_util, max(gr_engine_active) AS gr_engine_active, max(sm_active) AS sm_active,
           max(sm_occupancy) AS sm_occupancy, max(tensor_active) AS tensor_active, max(dram_active) AS dram_active,
           max(fb_used_bytes) AS fb_used_bytes, max(power_watts) AS power_watts,
           max(nvlink_tx_bytes_per_second) AS nvlink_tx_bytes_per_second,
           max(nvlink_rx_bytes_per_second) AS nvlink_rx_bytes_per_second
    FROM cleaned
    WHERE dedup
    GROUP BY ts, node, gpu_uuid, mig_gi_id, namespace, pod
    UNION ALL
    SELECT * FROM cleaned WHERE NOT dedup
),
percent_nodes AS (
    -- dcgm-exporter's GPU_UTIL is 0-100: a node (one exporter) whose gpu_util ever exceeds 1, or whose
    -- values are all whole numbers including a 1, reports percent. Judged per node, not per device,
    -- because a mostly idle device in percent (0, 0.3, 0.7 ...) looks exactly like a busy one in ratios.
    -- (reads samples, not cleaned, so that cleaned streams instead of being materialised twice)
    SELECT node
    FROM (SELECT node, CASE WHEN isfinite(gpu_util) AND gpu_util >= 0 THEN gpu_util END AS gpu_util FROM samples
          WHERE (node_lo IS NULL OR node >= node_lo) AND (node_hi IS NULL OR node <= node_hi))
    GROUP BY node
    HAVING max(gpu_util) > 1
        OR (bool_and(gpu_util = round(gpu_util)) AND max(gpu_util) = 1)
),
scaled AS (
    SELECT d.* REPLACE (
               CASE WHEN p.node IS NOT NULL THEN d.gpu_util / 100.0 ELSE d.gpu_util END AS gpu_util)
    FROM deduped d
    LEFT JOIN percent_nodes p ON p.node = d.node
),
clamped AS (
    -- ratios above 1 happen (SM_ACTIVE on MIG GI entities, DCGM #152): clamp to 1 and flag the row
    -- (not least(): it skips NULLs, and unknown must stay unknown)
    SELECT * REPLACE (
               CASE WHEN gpu_util > 1 THEN 1.0 ELSE gpu_util END AS gpu_util,
               CASE WHEN gr_engine_active > 1 THEN 1.0 ELSE gr_engine_active END AS gr_engine_active,
               CASE WHEN sm_active > 1 THEN 1.0 ELSE sm_active END AS sm_active,
               CASE WHEN sm_occupancy > 1 THEN 1.0 ELSE sm_occupancy END AS sm_occupancy,
               CASE WHEN tensor_active > 1 THEN 1.0 ELSE tensor_active END AS tensor_active,
               CASE WHEN dram_active > 1 THEN 1.0 ELSE dram_active END AS dram_active),
           coalesce(gpu_util > 1 OR gr_engine_active > 1 OR sm_active > 1 OR sm_occupancy > 1
                    OR tensor_active > 1 OR dram_active > 1, FALSE) AS ratio_clamped
    FROM scaled
),
attributed AS (
    SELECT c.*,
           c.gpu_uuid || coalesce('/' || c.mig_gi_id, '') AS device_key,
           -- reported = GPU_UTIL, else GR_ENGINE_ACTIVE (MIG has no GPU_UTIL); effective = SM_ACTIVE or unknown
           coalesce(c.gpu_util, c.gr_engine_active) AS reported,
           c.sm_active AS effective,
           p.team,
           -- the GPU share this sample stands for and its price per hour (pod allocation first, device second)
           coalesce(p.gpu_equivalents / p.device_count, d.gpu_share, 1.0) AS gpu_share,
           coalesce(p.usd_per_hour / p.device_count, d.usd_per_hour) AS usd_per_hour,
           c.pod IS NOT NULL AND coalesce(c.gpu_util, c.gr_engine_active) IS NOT NULL AS in_series
    FROM clamped c
    LEFT JOIN stg_devices d
      ON d.node = c.node AND d.gpu_uuid = c.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM c.mig_gi_id
    LEFT JOIN stg_pods p ON p.namespace = c.namespace AND p.pod = c.pod
),
spaced AS (
    -- a series = one (pod, device)'s samples that have a reported value. Each row keeps its neighbours'
    -- interval and readings so analyses find idle runs with scans and joins instead of window sorts.
    SELECT *,
           CASE WHEN in_series THEN epoch(ts) - lag(epoch(ts)) OVER series END AS dt_seconds,
           CASE WHEN in_series THEN lead(epoch(ts)) OVER series - epoch(ts) END AS next_dt_seconds,
           CASE WHEN in_series THEN lag(reported) OVER series END AS prev_reported,
           CASE WHEN in_series THEN lag(effective) OVER series END AS prev_effective,
           CASE WHEN in_series THEN lead(reported) OVER series END AS next_reported,
           CASE WHEN in_series THEN lead(effective) OVER series END AS next_effective
    FROM attributed
    WINDOW series AS (PARTITION BY in_series, namespace, pod, node, device_key ORDER BY ts)
),
steps AS (
    -- the series step: the median interval (a one-sample series falls back to 60 s)
    SELECT namespace, pod, node, device_key, median(dt_seconds) AS step_seconds
    FROM spaced WHERE in_series
    GROUP BY ALL
),
final AS (
    SELECT s.*, CASE WHEN s.in_series THEN coalesce(t.step_seconds, 60.0) END AS step_seconds
    FROM spaced s
    LEFT JOIN steps t
      ON s.in_series AND t.namespace = s.namespace AND t.pod = s.pod AND t.node = s.node AND t.device_key = s.device_key
)
SELECT * FROM final;

-- The same logic over every node, as a view (ad-hoc queries; stores whose samples are linked Parquet).
CREATE OR REPLACE VIEW stg_samples_live AS SELECT * FROM stg_samples_for(NULL, NULL);

-- The materialised table (empty until the first load; refresh.sql rebuilds it).
CREATE TABLE IF NOT EXISTS stg_samples AS SELECT * FROM stg_samples_live LIMIT 0;

-- Series (DESIGN §5) inside a window: the samples of allocated pods that have a reported value,
-- with dt_seconds / next_dt_seconds (intervals to the neighbouring samples), prev_/next_ reported
-- and effective (the neighbours' readings) and step_seconds (the series' median interval).
CREATE OR REPLACE MACRO stg_series(window_start, window_end) AS TABLE
SELECT * FROM stg_samples WHERE in_series AND ts >= window_start AND ts < window_end;
