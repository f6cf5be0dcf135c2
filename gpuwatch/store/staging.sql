-- Staging: the ONLY place units, names and duplicates change (dbt-style stg_* over raw tables).
-- Analyses read stg_* (and reclaim_audit) only. Statements are separated by ";\n\n" lines.

-- Prices: one per model (or "<model>/<mig profile>"); matched on model_key (trimmed, case-folded),
-- so "NVIDIA H100 80GB HBM3" and "nvidia h100 80gb hbm3" are one model; a load refuses negative,
-- non-finite and absurd prices, and a device whose model has no price here stays unpriced (NULL),
-- which chargeback reports as such, never as $0. A "<model>/<profile>" price refines a priced GPU's
-- MIG instances; it does not price an instance whose GPU has no price (that GPU is outside the fleet
-- cost, so its instances' use must be too).
CREATE OR REPLACE MACRO model_key(name) AS lower(trim(name));

-- The small staged relations are defined as <name>_def views and kept as tables <name> (each made empty
-- right after its definition, so the definitions after it bind against it; refresh_streams.sql fills
-- them after every load, in dependency order).

-- Precedence: the cluster's own prices (bundle prices.csv, `ingest --prices FILE`, the chart's
-- prices.models) over the shipped list prices (only where `ingest --prices list` copied them in);
-- price_source says which one applies to each model. A cluster price with a node_label
-- ("karpenter.sh/capacity-type=spot") applies only on nodes carrying that label (the nodes file);
-- label_key is the key as kube-state-metrics names it (every character outside [a-zA-Z0-9_] as "_").
CREATE OR REPLACE VIEW stg_prices_def AS
WITH raw AS (
    SELECT trim(gpu_model) AS gpu_model, model_key(gpu_model) AS model_key, usd_per_gpu_hour,
           nullif(trim(node_label), '') AS node_label
    FROM prices
    WHERE isfinite(usd_per_gpu_hour) AND usd_per_gpu_hour >= 0
),
cluster AS (
    SELECT model_key, node_label, min(gpu_model) AS gpu_model, max(usd_per_gpu_hour) AS usd_per_gpu_hour,
           'cluster price' || coalesce(' on nodes with ' || node_label, '') AS price_source
    FROM raw GROUP BY model_key, node_label
),
listed AS (
    SELECT model_key(gpu_model) AS model_key, NULL AS node_label, min(trim(gpu_model)) AS gpu_model,
           max(usd_per_gpu_hour) AS usd_per_gpu_hour,
           'list price as of ' || strftime(max(as_of), '%Y-%m-%d') || ' (' || min(reference) || ')' AS price_source
    FROM list_prices
    WHERE isfinite(usd_per_gpu_hour) AND usd_per_gpu_hour >= 0
      AND model_key(gpu_model) NOT IN (SELECT model_key FROM cluster WHERE node_label IS NULL)
    GROUP BY model_key(gpu_model)
),
final AS (
    SELECT * FROM cluster UNION ALL SELECT * FROM listed
)
SELECT gpu_model, usd_per_gpu_hour, model_key, price_source, node_label,
       regexp_replace(split_part(node_label, '=', 1), '[^a-zA-Z0-9_]', '_', 'g') AS label_key,
       substr(node_label, length(split_part(node_label, '=', 1)) + 2) AS label_value
FROM final;
CREATE OR REPLACE TABLE stg_prices AS SELECT * FROM stg_prices_def LIMIT 0;

-- Node labels (the nodes file; kube_node_labels), one JSON object per node.
CREATE OR REPLACE VIEW stg_nodes_def AS
SELECT DISTINCT ON (node) node, CAST(nullif(trim(labels), '') AS JSON) AS labels FROM nodes ORDER BY node;
CREATE OR REPLACE TABLE stg_nodes AS SELECT * FROM stg_nodes_def LIMIT 0;

-- The price of model key `key` on node `node_name`: {usd, source}. A price for a node label the node
-- carries wins over the model's plain price (several matching labels: the first by label text);
-- NULL when neither exists (unpriced).
CREATE OR REPLACE MACRO price_on(node_name, key) AS (
    SELECT arg_max({'usd': p.usd_per_gpu_hour, 'source': p.price_source},
                   [(p.node_label IS NOT NULL)::INTEGER, -rank_text]) 
    FROM (SELECT *, dense_rank() OVER (ORDER BY node_label NULLS LAST) AS rank_text FROM stg_prices WHERE model_key = key) p
    WHERE p.node_label IS NULL
       OR (SELECT n.labels ->> p.label_key FROM stg_nodes n WHERE n.node = node_name) = p.label_value
);

-- The two sample rules, declared once and used by every analysis (idle_hoarding, chargeback,
-- fleet_timeseries, false_utilization). Idle: reported utilization below the threshold, and SM
-- activity too where it is known (unknown activity does not veto); a NULL reported value is unknown,
-- never idle. False utilization: busy-looking (reported at or above a floor) while SM activity is
-- below a bound; judged only where SM activity is known.
CREATE OR REPLACE MACRO is_idle(reported, effective, below) AS
    reported < below AND coalesce(effective < below, TRUE);
CREATE OR REPLACE MACRO is_false_util(reported, effective, reported_min, effective_below) AS
    effective IS NOT NULL AND reported >= reported_min AND effective < effective_below;

-- Sums and means of fractional values whose result does not depend on the order rows arrive in (a
-- double sum does: its rounding errors follow the order, which follows how the rows were loaded and
-- staged). Each value is rounded to 12 decimals and summed exactly (DECIMAL), so the same rows give the
-- same bytes however they were loaded: an hour at a time or a week at once (tests/test_store_incremental.py).
-- exact_part: the DECIMAL sum itself, which adds up exactly again (the hourly rollup stores such parts;
-- exact_total turns a sum of parts into the double exact_sum gives over the same rows).
CREATE OR REPLACE MACRO exact_part(x) AS sum(CAST(x AS DECIMAL(38, 12)));
CREATE OR REPLACE MACRO exact_total(parts) AS CAST(sum(parts) AS DOUBLE);
CREATE OR REPLACE MACRO exact_sum(x) AS CAST(exact_part(x) AS DOUBLE);
CREATE OR REPLACE MACRO exact_avg(x) AS exact_sum(x) / count(x);

-- Money is rounded to the cent once, per pod (the finest row anyone reads: idle_hoarding, false_utilization,
-- utilization, mig_mismatch and chargeback's pod parts), half to even on the amount to 9 decimals (two
-- analyses that reach the same amount by other sums round it alike; half-cents are common, a minute at
-- $4.10/h is 6 5/6 cents, and half-up would push every total up); every total shown anywhere is a sum
-- of these cents, so a team, a page, the CLI and the report quote the same figure (docs/architecture.md#billing).
CREATE OR REPLACE MACRO usd_cents(x) AS CAST(round_even(CAST(round(x, 9) AS DECIMAL(38, 9)), 2) AS DOUBLE);

-- Devices: one row per GPU and per MIG instance, with its share of the GPU and its price.
CREATE OR REPLACE VIEW stg_devices_def AS
WITH raw AS (
    SELECT DISTINCT ON (node, gpu_uuid, mig_gi_id) * FROM devices
),
sized AS (
    -- compute slices keyed on the profile id (ref_mig_profiles, written from gpuwatch/mig.py); the
    -- name ("3g.40gb", "1c.3g.71gb") is the fallback
    SELECT raw.*, coalesce(m.compute_slices, TRY_CAST(regexp_extract(raw.mig_profile, '(\d+)g\.', 1) AS INTEGER))
               AS compute_slices
    FROM raw LEFT JOIN ref_mig_profiles m ON m.profile_id = raw.mig_profile_id
),
final AS (
    SELECT s.*,
           s.gpu_uuid || coalesce('/' || s.mig_gi_id, '') AS device_key,
           -- a MIG instance is its share of the GPU's compute slices
           CASE WHEN s.mig_gi_id IS NULL THEN 1.0 ELSE mig_gpu_share(s.compute_slices) END AS gpu_share,
           CASE WHEN s.mig_gi_id IS NULL THEN s.model_price.usd
                WHEN s.model_price.usd IS NOT NULL
                THEN coalesce(s.profile_price.usd, s.model_price.usd * mig_gpu_share(s.compute_slices)) END AS usd_per_hour
    FROM (SELECT *, price_on(node, model_key(gpu_model)) AS model_price,
                 price_on(node, model_key(gpu_model || '/' || mig_profile)) AS profile_price FROM sized) s
)
SELECT * FROM final;
CREATE OR REPLACE TABLE stg_devices AS SELECT * FROM stg_devices_def LIMIT 0;

-- MIG profiles a pod may be offered, per kind of GPU (model, FB total MiB) in the store, with what an
-- instance of each holds: its memory as the GPUs said, never a slice fraction (docs/architecture.md#mig-placement):
-- the smallest FB total of that profile's instances of the model in the store, else what a real GPU of
-- that size reported (ref_mig_captured, gpuwatch/mig.py); a profile with neither is left out. Kinds: the
-- whole GPUs' FB totals, and the size a MIG instance's own FB total names (9984 MiB on a 1g.10gb: an
-- 81559 MiB H100). compute_share = the instance's SMs / the GPU's where captured, else slices / 7.
CREATE OR REPLACE VIEW stg_mig_targets_def AS
WITH instances AS (
    SELECT gpu_model, mig_profile_id AS profile_id, min(fb_total_bytes) AS memory_bytes, min(mig_profile) AS name
    FROM stg_devices
    WHERE mig_gi_id IS NOT NULL AND mig_profile_id IS NOT NULL AND fb_total_bytes > 0
    GROUP BY ALL
),
kinds AS (
    SELECT DISTINCT gpu_model, fb_total_bytes // 1048576 AS gpu_fb_mib
    FROM stg_devices WHERE mig_gi_id IS NULL AND fb_total_bytes > 0
    UNION
    SELECT DISTINCT d.gpu_model, r.gpu_fb_mib
    FROM stg_devices d
    JOIN ref_mig_captured r ON r.profile_id = d.mig_profile_id AND r.memory_mib * 1048576 = d.fb_total_bytes
)
SELECT k.gpu_model, k.gpu_fb_mib, p.profile_id, p.label, p.compute_slices, p.memory_slices,
       -- never more than the slices' fraction of the GPU, an upper bound on every GPU captured (an
       -- instance row claiming more is not believed)
       least(coalesce(i.memory_bytes, r.memory_mib * 1048576),
             k.gpu_fb_mib * 1048576 * mig_memory_share(p.memory_slices)) AS memory_bytes,
       coalesce(r.sms / r.gpu_sms, mig_gpu_share(p.compute_slices)) AS compute_share,
       coalesce(i.name, r.name, p.compute_slices || 'g.'
           || CAST(round(k.gpu_fb_mib * mig_memory_share(p.memory_slices) / 1024.0) AS INTEGER) || 'gb') AS profile
FROM kinds k
CROSS JOIN ref_mig_profiles p
LEFT JOIN instances i ON i.gpu_model = k.gpu_model AND i.profile_id = p.profile_id
LEFT JOIN ref_mig_captured r ON r.gpu_fb_mib = k.gpu_fb_mib AND r.profile_id = p.profile_id
WHERE coalesce(i.memory_bytes, r.memory_mib) IS NOT NULL;
CREATE OR REPLACE TABLE stg_mig_targets AS SELECT * FROM stg_mig_targets_def LIMIT 0;

-- Physical GPUs: one row per (node, gpu_uuid), its model (the whole-GPU row's: an instance row naming
-- another model does not reprice it) and price per GPU-hour (NULL = unpriced); the fleet every
-- page counts and prices (chargeback's fleet cost, Fleet's GPUs and cost per bucket).
CREATE OR REPLACE VIEW stg_gpus_def AS
WITH gpus AS (
    SELECT d.node, d.gpu_uuid, coalesce(min(d.gpu_model) FILTER (WHERE d.mig_gi_id IS NULL), min(d.gpu_model)) AS gpu_model,
           exact_sum(CASE WHEN d.mig_gi_id IS NOT NULL THEN d.usd_per_hour END) AS instances_usd_per_hour,
           bool_or(d.mig_gi_id IS NOT NULL) AS mig
    FROM stg_devices d
    GROUP BY d.node, d.gpu_uuid
),
final AS (
    SELECT g.*, price_on(g.node, model_key(g.gpu_model)).usd AS usd_per_gpu_hour,
           coalesce(price_on(g.node, model_key(g.gpu_model)).source, 'unpriced') AS price_source
    FROM gpus g
)
SELECT * FROM final;
CREATE OR REPLACE TABLE stg_gpus AS SELECT * FROM stg_gpus_def LIMIT 0;

-- Namespace -> team (the teams file): an exact name wins over a glob, a longer glob over a shorter one;
-- NULL when no row matches.
-- In a store holding several clusters (ingest --cluster), a namespace is "<cluster>/<namespace>": a
-- teams row naming a bare namespace ("nlp-train", "nlp-*") maps it in every cluster, one naming a
-- qualified one ("prod/nlp-train", "prod/nlp-*") in that cluster only, and wins over a bare one
-- (after exactness: an exact name still wins over a glob).
CREATE OR REPLACE MACRO cluster_of(name) AS CASE WHEN contains(name, '/') THEN split_part(name, '/', 1) END;
CREATE OR REPLACE MACRO unqualified(name) AS regexp_replace(name, '^[^/]*/', '');
CREATE OR REPLACE MACRO namespace_team(ns) AS (
    SELECT arg_max(trim(t.team), (trim(t.namespace) IN (ns, unqualified(ns)), contains(trim(t.namespace), '/'),
                                  length(trim(t.namespace)), t.team))
    FROM teams t
    WHERE CASE WHEN contains(trim(t.namespace), '/') THEN ns GLOB trim(t.namespace)
               ELSE unqualified(ns) GLOB trim(t.namespace) END
      AND nullif(trim(t.team), '') IS NOT NULL
);

-- Pods: one allocation per (namespace, pod) (the latest start wins), its team and what it costs.
CREATE OR REPLACE VIEW stg_pods_def AS
WITH raw AS (
    SELECT DISTINCT ON (namespace, pod) * FROM pods ORDER BY namespace, pod, start_ts DESC NULLS LAST
),
node_model AS (
    SELECT node, min(gpu_model) AS gpu_model, count(DISTINCT gpu_uuid) AS gpus FROM stg_devices GROUP BY node
),
device_model AS (
    SELECT node, gpu_uuid, min(gpu_model) AS gpu_model FROM stg_devices GROUP BY node, gpu_uuid
),
shaped AS (
    SELECT r.* EXCLUDE (team),
           -- chargeback key: the pod's `team` label, else its namespace's team (teams file), else the
           -- namespace (docs/architecture.md#finding-semantics)
           coalesce(nullif(trim(r.team), ''), namespace_team(r.namespace), r.namespace) AS team,
           greatest(coalesce(len(string_split(nullif(r.device_ids, ''), ',')), 0), 1) AS device_count,
           -- capacity the allocation can hold: its listed devices, else its node's GPUs (unknown: no cap)
           least(CASE WHEN nullif(r.device_ids, '') IS NOT NULL THEN len(string_split(r.device_ids, ',')) END,
                 nm.gpus) AS capacity,
           nullif(regexp_extract(r.gpu_resource, 'mig-(.+)$', 1), '') AS mig_profile,
           -- the model of the pod's (first) listed GPU; the node's only where the list names no GPU of
           -- it (a node with two models must not price a pod by the other one)
           coalesce(dm.gpu_model, nm.gpu_model) AS gpu_model
    FROM raw r
    LEFT JOIN node_model nm ON nm.node = r.node
    LEFT JOIN device_model dm ON dm.node = r.node AND dm.gpu_uuid = trim(string_split(r.device_ids, ',')[1])
),
capped AS (
    -- an allocation is capped at the capacity it can hold (1.5 GPUs on one whole GPU, 1000 on one
    -- device); the excess is a data problem chargeback reports (over_gpus), never a charge
    SELECT s.* EXCLUDE (gpu_count), s.gpu_count AS requested_gpu_count,
           least(s.gpu_count, coalesce(s.capacity, s.gpu_count)) AS gpu_count,
           s.gpu_count - least(s.gpu_count, coalesce(s.capacity, s.gpu_count)) AS over_gpus
    FROM shaped s
),
final AS (
    SELECT s.*,
           CASE WHEN s.mig_profile IS NULL THEN 1.0
                ELSE mig_gpu_share(TRY_CAST(regexp_extract(s.mig_profile, '(\d+)g\.', 1) AS INTEGER)) END AS slice_share,
           -- whole-GPU equivalents: a time-sliced pod's fractional gpu_count, a MIG pod's share of its GPU
           s.gpu_count * slice_share AS gpu_equivalents,
           s.gpu_count * CASE WHEN s.mig_profile IS NULL THEN s.model_price.usd
                              WHEN s.model_price.usd IS NOT NULL
                              THEN coalesce(s.profile_price.usd, s.model_price.usd * slice_share) END AS usd_per_hour
    FROM (SELECT *, price_on(node, model_key(gpu_model)) AS model_price,
                 price_on(node, model_key(gpu_model || '/' || mig_profile)) AS profile_price FROM capped) s
)
SELECT * FROM final;
CREATE OR REPLACE TABLE stg_pods AS SELECT * FROM stg_pods_def LIMIT 0;

-- Samples are staged in four materialised tables. A load re-stages only the devices and time ranges it
-- replaced (store/restage.py); a full refresh (store/staged.py) rebuilds them all. Both give the same rows:
--   stg_stream_aliases  each raw key (sample_keys: node, gpu_uuid, mig_gi_id, namespace, pod, container)
--                       -> its stream, with its sample count
--   stg_stream_dts      per stream, how many series rows have each interval to their predecessor (the
--                       series step is their median: kept as counts, a load updates it without a scan)
--   stg_streams         one row per stream = (node, device, namespace, pod) after trimming, with what
--                       is constant along it: device_key, team, GPU share, price, series step
--   stg_sample_rows     one row per (stream, ts): clean values and each row's place in its series
-- Analyses aggregate stg_sample_rows by the integer stream_id and join stg_streams after (about
-- 3x cheaper than grouping 20M rows by strings); stg_samples joins them back into one wide view.

-- A stream's id: a 63-bit hash of its trimmed key, so it does not depend on which streams were loaded
-- before or in what order (a load hour by hour stages what one load of the week stages). ``salt`` is
-- the store's (store_meta 'stream_salt'): refresh() changes it in the unlikely case two keys collide.
CREATE OR REPLACE MACRO stream_id_of(salt, node, gpu_uuid, mig_gi_id, namespace, pod) AS
    CAST(hash(salt, node, gpu_uuid, mig_gi_id, namespace, pod) >> 1 AS BIGINT);

-- The store's stream salt (store_meta 'stream_salt', 0 until a collision changes it).
CREATE OR REPLACE MACRO stg_stream_salt() AS
    coalesce((SELECT CAST(value AS BIGINT) FROM store_meta WHERE key = 'stream_salt'), 0);

-- Raw keys (sample_keys) with their sample counts, one pass over the readings' key ids. Units are never
-- guessed from values here: every reader converts from the unit its source declares and the bundle
-- contract says ratios (a bundle gpu_util above 1 is refused at load). ``src``: the table of readings
-- ('sample_readings', or a load's new or replaced ones).
CREATE OR REPLACE MACRO stg_stream_aliases_for(salt, src := 'sample_readings') AS TABLE
WITH counted AS (
    SELECT key_id, count(*) AS samples
    FROM query_table(src)
    GROUP BY key_id
),
keyed AS (
    SELECT c.key_id, k.node, k.gpu_uuid, k.mig_gi_id, c.samples,
           k.namespace AS raw_namespace, k.pod AS raw_pod, k.container AS raw_container,
           nullif(trim(k.namespace), '') AS namespace, nullif(trim(k.pod), '') AS pod,
           nullif(trim(k.container), '') AS container
    FROM counted c
    JOIN sample_keys k USING (key_id)
),
final AS (
    SELECT *, stream_id_of(salt, node, gpu_uuid, mig_gi_id, namespace, pod) AS stream_id
    FROM keyed
)
SELECT * FROM final;

CREATE TABLE IF NOT EXISTS stg_stream_aliases AS SELECT * FROM stg_stream_aliases_for(0) LIMIT 0;

CREATE TABLE IF NOT EXISTS stg_stream_dts (stream_id BIGINT, dt_seconds DOUBLE, n BIGINT);

-- Each stream's series step from stg_stream_dts: the median interval between its series rows, computed
-- from the counts as median() computes it over the rows (the middle value, or the two middle values'
-- median); a series of one sample: 60 s; a stream without series rows: NULL (not in this table).
CREATE OR REPLACE MACRO stg_stream_steps() AS TABLE
WITH ordered AS (
    SELECT stream_id, dt_seconds, n,
           sum(n) OVER (PARTITION BY stream_id ORDER BY dt_seconds ROWS UNBOUNDED PRECEDING) AS upto,
           sum(n) OVER (PARTITION BY stream_id) AS total
    FROM stg_stream_dts
    WHERE dt_seconds IS NOT NULL AND n > 0
),
middle AS (
    -- 0-based positions floor((total - 1) / 2) and ceil((total - 1) / 2); an entry holds [upto - n, upto - 1]
    SELECT stream_id,
           min(dt_seconds) FILTER (WHERE upto - 1 >= (total - 1) // 2) AS low,
           min(dt_seconds) FILTER (WHERE upto - 1 >= total // 2) AS high
    FROM ordered
    GROUP BY stream_id
),
series AS (
    SELECT DISTINCT stream_id FROM stg_stream_dts WHERE n > 0
)
SELECT s.stream_id, coalesce(list_median([m.low, m.high]), 60.0) AS step_seconds
FROM series s LEFT JOIN middle m USING (stream_id);

-- Streams: what is constant along one: the GPU share each sample stands for and its price per hour
-- (pod allocation first, device second), the team; step_seconds (the series' median interval, a
-- one-sample series 60 s; NULL without series rows: stg_stream_steps). Rebuilt whole after every load
-- (one row per stream: cheap), so a new price, team or allocation reaches every stream.
CREATE OR REPLACE MACRO stg_streams_for() AS TABLE
WITH streams AS (
    SELECT DISTINCT stream_id, node, gpu_uuid, mig_gi_id, namespace, pod FROM stg_stream_aliases
),
final AS (
    SELECT s.stream_id, s.node, s.gpu_uuid, s.mig_gi_id, s.namespace, s.pod,
           s.gpu_uuid || coalesce('/' || s.mig_gi_id, '') AS device_key,
           -- a pod outside the pods file still gets its namespace's team (analyses fall back to the namespace)
           coalesce(p.team, namespace_team(s.namespace)) AS team,
           -- a pod listed with gpu_count 0 whose samples show it on a GPU held it all the same: its samples
           -- stand for the device's share at the device's price, never $0 (data_coverage counts such pods)
           CAST(coalesce(CASE WHEN p.gpu_count > 0 THEN p.gpu_equivalents / p.device_count END, d.gpu_share, 1.0)
                AS DOUBLE) AS gpu_share,
           CAST(coalesce(CASE WHEN p.gpu_count > 0 THEN p.usd_per_hour / p.device_count END, d.usd_per_hour) AS DOUBLE)
               AS usd_per_hour,
           -- a dense pod number, for analyses that need every row of a pod together (quantiles)
           CASE WHEN s.pod IS NOT NULL
                THEN CAST(dense_rank() OVER (ORDER BY s.namespace NULLS FIRST, s.pod NULLS FIRST) AS INTEGER) END
               AS pod_id,
           CAST(st.step_seconds AS DOUBLE) AS step_seconds
    FROM streams s
    LEFT JOIN stg_stream_steps() st USING (stream_id)
    LEFT JOIN stg_devices d
      ON d.node = s.node AND d.gpu_uuid = s.gpu_uuid AND d.mig_gi_id IS NOT DISTINCT FROM s.mig_gi_id
    LEFT JOIN stg_pods p ON p.namespace = s.namespace AND p.pod = s.pod
)
SELECT * FROM final;

CREATE TABLE IF NOT EXISTS stg_streams AS SELECT * FROM stg_streams_for() LIMIT 0;

-- A series = one stream's samples that have a reported value. Each row keeps its neighbours' interval
-- and readings so analyses find idle runs with scans and joins instead of window sorts: x at the row
-- before / after it in its series (NULL outside a series). Used by the full staging below and by a
-- load's re-staging (store/restage.py).
CREATE OR REPLACE MACRO series_lag(x, stream_id, in_series, ts) AS
    CASE WHEN in_series THEN lag(x) OVER (PARTITION BY stream_id, in_series ORDER BY ts) END;
CREATE OR REPLACE MACRO series_lead(x, stream_id, in_series, ts) AS
    CASE WHEN in_series THEN lead(x) OVER (PARTITION BY stream_id, in_series ORDER BY ts) END;

-- A row's reported utilization: GPU_UTIL, else GR_ENGINE_ACTIVE (MIG has no GPU_UTIL), stored; its
-- effective one: SM_ACTIVE, or unknown, read as such (stg_sample_rows), not stored twice. (A stored
-- reported lets DuckDB filter on it in the scan; coalesce() over two columns it cannot.)
CREATE OR REPLACE MACRO sample_reported(gpu_util, gr_engine_active) AS coalesce(gpu_util, gr_engine_active);
CREATE OR REPLACE MACRO sample_effective(sm_active) AS sm_active;

-- Duplicates of one sample (stg_sample_values): the value their copies agree on, NULL where they conflict.
CREATE OR REPLACE MACRO agreed(x) AS CASE WHEN min(x) = max(x) THEN min(x) END;

-- Row values: clean values, one row per (stream, ts), units as ratios 0-1 (docs/architecture.md#finding-semantics). Every rule here is
-- per node (dedup keys and series include the node), so the macro takes a
-- node range [node_lo, node_hi] (NULL = open): refresh() runs it a few nodes at a time, keeping each
-- window sort in memory, and the result is the same as one pass over every node.
-- dedup := FALSE skips the duplicate merge; only for a range refresh() has checked has no duplicates.
-- src: the readings ('sample_readings'; a load's re-staging passes its new ones), whose keys are in
-- stg_stream_aliases.
CREATE OR REPLACE MACRO stg_sample_values(node_lo, node_hi, dedup := TRUE, src := 'sample_readings') AS TABLE
WITH cleaned AS NOT MATERIALIZED (
    -- NaN, ±inf and negative readings are missing, never 0; negative rates are counter resets
    SELECT a.stream_id, s.ts, s.key_id AS container_key,
           CASE WHEN isfinite(s.gpu_util) AND s.gpu_util >= 0 THEN s.gpu_util END AS gpu_util,
           CASE WHEN isfinite(s.gr_engine_active) AND s.gr_engine_active >= 0 THEN s.gr_engine_active END AS gr_engine_active,
           CASE WHEN isfinite(s.sm_active) AND s.sm_active >= 0 THEN s.sm_active END AS sm_active,
           CASE WHEN isfinite(s.sm_occupancy) AND s.sm_occupancy >= 0 THEN s.sm_occupancy END AS sm_occupancy,
           CASE WHEN isfinite(s.tensor_active) AND s.tensor_active >= 0 THEN s.tensor_active END AS tensor_active,
           CASE WHEN isfinite(s.dram_active) AND s.dram_active >= 0 THEN s.dram_active END AS dram_active,
           CASE WHEN isfinite(s.fb_used_bytes) AND s.fb_used_bytes >= 0 THEN s.fb_used_bytes END AS fb_used_bytes,
           CASE WHEN isfinite(s.power_watts) AND s.power_watts >= 0 THEN s.power_watts END AS power_watts,
           CASE WHEN isfinite(s.nvlink_tx_bytes_per_second) AND s.nvlink_tx_bytes_per_second >= 0
                THEN s.nvlink_tx_bytes_per_second END AS nvlink_tx_bytes_per_second,
           CASE WHEN isfinite(s.nvlink_rx_bytes_per_second) AND s.nvlink_rx_bytes_per_second >= 0
                THEN s.nvlink_rx_bytes_per_second END AS nvlink_rx_bytes_per_second,
           a.pod IS NOT NULL AS has_pod, a.container
    FROM query_table(src) s
    JOIN stg_stream_aliases a USING (key_id)
    WHERE (node_lo IS NULL OR a.node >= node_lo) AND (node_hi IS NULL OR a.node <= node_hi)
),
deduped AS (
    -- the same (ts, device, pod) loaded twice is one sample (docs/architecture.md#billing): copies that
    -- agree, or where only one knows a value, give that value; copies that CONFLICT give NULL (unknown),
    -- never the max: a stray copy at 0.99 must not turn an idle GPU busy (nor the reverse), so that time
    -- is not judged idle or busy and is billed as unobserved from its allocation; `conflicted` flags the
    -- row (data_coverage counts them, `gpuwatch analyze` reports them). Its container is the greatest
    -- known one, kept as the raw key it came with (container_key)
    SELECT stream_id, ts,
           coalesce(struct_extract(max({'container': container, 'key': container_key}) FILTER (WHERE container IS NOT NULL),
                                   'key'), max(container_key)) AS container_key,
           agreed(gpu_util) AS gpu_util, agreed(gr_engine_active) AS gr_engine_active, agreed(sm_active) AS sm_active,
           agreed(sm_occupancy) AS sm_occupancy, agreed(tensor_active) AS tensor_active, agreed(dram_active) AS dram_active,
           agreed(fb_used_bytes) AS fb_used_bytes, agreed(power_watts) AS power_watts,
           agreed(nvlink_tx_bytes_per_second) AS nvlink_tx_bytes_per_second,
           agreed(nvlink_rx_bytes_per_second) AS nvlink_rx_bytes_per_second, any_value(has_pod) AS has_pod,
           coalesce(min(gpu_util) <> max(gpu_util) OR min(gr_engine_active) <> max(gr_engine_active)
                    OR min(sm_active) <> max(sm_active) OR min(sm_occupancy) <> max(sm_occupancy)
                    OR min(tensor_active) <> max(tensor_active) OR min(dram_active) <> max(dram_active)
                    OR min(fb_used_bytes) <> max(fb_used_bytes) OR min(power_watts) <> max(power_watts)
                    OR min(nvlink_tx_bytes_per_second) <> max(nvlink_tx_bytes_per_second)
                    OR min(nvlink_rx_bytes_per_second) <> max(nvlink_rx_bytes_per_second), FALSE) AS conflicted
    FROM cleaned
    WHERE dedup
    GROUP BY stream_id, ts
    UNION ALL
    SELECT * EXCLUDE (container), FALSE AS conflicted FROM cleaned WHERE NOT dedup
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
    FROM deduped
),
attributed AS (
    SELECT * EXCLUDE (has_pod), sample_reported(gpu_util, gr_engine_active) AS reported,
           has_pod AND sample_reported(gpu_util, gr_engine_active) IS NOT NULL AS in_series
    FROM clamped
),
final AS (
    SELECT * FROM attributed
)
SELECT * FROM final;

-- Rows: their values and their place in their series (the staged table stg_sample_rows); the values
-- come from the readings (stg_sample_rows_for) or, in a load's re-staging, from a table of values:
-- the new rows' and their series neighbours' as staged (stg_sample_rows_of).
CREATE OR REPLACE MACRO stg_series_place(ts, stream_id, in_series, reported, effective) AS {
    'dt_seconds': epoch(ts) - series_lag(epoch(ts), stream_id, in_series, ts),
    'next_dt_seconds': series_lead(epoch(ts), stream_id, in_series, ts) - epoch(ts),
    'prev_reported': series_lag(reported, stream_id, in_series, ts),
    'prev_effective': series_lag(effective, stream_id, in_series, ts),
    'next_reported': series_lead(reported, stream_id, in_series, ts),
    'next_effective': series_lead(effective, stream_id, in_series, ts)};

CREATE OR REPLACE MACRO stg_sample_rows_for(node_lo, node_hi, dedup := TRUE, src := 'sample_readings') AS TABLE
SELECT *, unnest(stg_series_place(ts, stream_id, in_series, reported, sample_effective(sm_active)))
FROM stg_sample_values(node_lo, node_hi, dedup := dedup, src := src);

CREATE OR REPLACE MACRO stg_sample_rows_of(values_src) AS TABLE
SELECT *, unnest(stg_series_place(ts, stream_id, in_series, reported, sample_effective(sm_active)))
FROM query_table(values_src);

CREATE TABLE IF NOT EXISTS stg_sample_rows_stored AS SELECT * FROM stg_sample_rows_for(NULL, NULL) LIMIT 0;

-- The staged rows as analyses read them: the stored columns and each row's effective value.
CREATE OR REPLACE VIEW stg_sample_rows AS
SELECT *, sample_effective(sm_active) AS effective
FROM stg_sample_rows_stored;

-- Every staged sample, wide: rows joined to their stream (ad-hoc queries, the app's time series).
CREATE OR REPLACE VIEW stg_samples AS
SELECT r.ts, k.node, k.gpu_uuid, k.mig_gi_id, k.namespace, k.pod, c.container,
       r.gpu_util, r.gr_engine_active, r.sm_active, r.sm_occupancy, r.tensor_active, r.dram_active,
       r.fb_used_bytes, r.power_watts, r.nvlink_tx_bytes_per_second, r.nvlink_rx_bytes_per_second,
       r.ratio_clamped, r.conflicted, k.device_key, r.reported, r.effective, k.team, k.gpu_share, k.usd_per_hour,
       r.in_series, r.dt_seconds, r.next_dt_seconds, r.prev_reported, r.prev_effective, r.next_reported,
       r.next_effective, CASE WHEN r.in_series THEN k.step_seconds END AS step_seconds, r.stream_id
FROM stg_sample_rows r
JOIN stg_streams k USING (stream_id)
LEFT JOIN stg_stream_aliases c ON c.key_id = r.container_key;

-- Series (docs/architecture.md#finding-semantics) inside a window, narrow: the rows of allocated pods that have a reported value,
-- with dt_seconds / next_dt_seconds (intervals to the neighbouring samples) and prev_/next_ reported
-- and effective (the neighbours' readings). Per-stream constants are in stg_streams (by stream_id).
CREATE OR REPLACE MACRO stg_series_rows(window_start, window_end) AS TABLE
SELECT * FROM stg_sample_rows WHERE in_series AND ts >= window_start AND ts < window_end;

-- The same series, wide (stg_samples' columns).
CREATE OR REPLACE MACRO stg_series(window_start, window_end) AS TABLE
SELECT * FROM stg_samples WHERE in_series AND ts >= window_start AND ts < window_end;

-- When a physical GPU (node, gpu_uuid) is known to exist inside [lo, hi): the fleet costs money only
-- then (docs/architecture.md#billing). Evidence: (1) its samples (any stream of the GPU, MIG instances
-- and sharing pods included): samples at most presence_gap_seconds() apart are one run (a scrape outage,
-- an exporter restart: the GPU was there), and a run covers its samples and one step (its median
-- interval) either side: the documented tolerance; (2) the allocations the cluster reports on its node (pods file: while
-- a pod runs on a node, the node and its GPUs exist). A GPU without evidence in the window (scaled away,
-- not yet created) costs nothing there; no time past the data is billed. Node lifetimes are not in the
-- data gpuwatch reads (kube_node_created is not collected), so samples and allocations are the evidence.
-- Columns: node, gpu_uuid, lo_s, hi_s (epoch seconds, one row per span; one GPU's spans are disjoint).
CREATE OR REPLACE MACRO presence_gap_seconds() AS 3600.0;

CREATE OR REPLACE MACRO stg_gpu_presence(lo, hi) AS TABLE
WITH devs AS (
    -- an integer per GPU: the window sort below runs on it, not on the text keys
    SELECT stream_id, node, gpu_uuid, dense_rank() OVER (ORDER BY node, gpu_uuid) AS dev FROM stg_streams
),
gaps AS (
    SELECT d.dev, epoch(r.ts) AS t, epoch(r.ts) - lag(epoch(r.ts)) OVER (PARTITION BY d.dev ORDER BY r.ts) AS dt
    FROM stg_sample_rows r JOIN devs d USING (stream_id)
    WHERE r.ts >= lo::TIMESTAMP - to_seconds(presence_gap_seconds()) AND r.ts < hi
),
runs AS (
    SELECT *, sum(CASE WHEN dt IS NULL OR dt > presence_gap_seconds() THEN 1 ELSE 0 END)
                  OVER (PARTITION BY dev ORDER BY t ROWS UNBOUNDED PRECEDING) AS run
    FROM gaps
),
run_steps AS (
    SELECT dev, run, min(t) AS first_s, max(t) AS last_s,
           coalesce(median(dt) FILTER (WHERE dt > 0 AND dt <= presence_gap_seconds()), 60.0) AS step_s
    FROM runs GROUP BY dev, run
),
stream_range AS (
    SELECT stream_id, min(ts) AS first_ts, max(ts) AS last_ts FROM stg_sample_rows GROUP BY stream_id
),
sampled AS (
    -- a run stands for one step (its median interval; one sample alone: 60 s) either side of its samples:
    -- the GPU was there until the next scrape was due, and a sample counts a whole step wherever the
    -- scrape fell in it (as observed cost and fleet_timeseries count it: a node scraped 17 s past the
    -- minute is sampled for the whole minute, so never more sampled than present); never before the
    -- data's first sample (a wider window over the same data bills the same)
    SELECT dev, greatest(first_s - step_s, (SELECT epoch(min(first_ts)) FROM stream_range)) AS lo_s,
           last_s + step_s AS hi_s
    FROM run_steps
),
node_end AS (
    -- where each node's samples end, over all the data (not only the window's: an open allocation on a
    -- node that stopped reporting last week must not bill this week), plus the median step of its streams
    SELECT k.node, epoch(max(l.last_ts)) + coalesce(median(k.step_seconds), 60.0) AS hi_s
    FROM stream_range l JOIN stg_streams k USING (stream_id) GROUP BY k.node
),
held AS (
    -- allocations on the node: while a pod runs there, the node and so each of its GPUs exists (an open
    -- allocation ends where its node's samples end, else at hi)
    SELECT p.node, epoch(coalesce(p.start_ts, lo::TIMESTAMP)) AS lo_s,
           coalesce(epoch(p.end_ts), e.hi_s, epoch(hi::TIMESTAMP)) AS hi_s
    FROM stg_pods p LEFT JOIN node_end e USING (node)
    WHERE p.gpu_count > 0
),
spans AS (
    SELECT g.node, g.gpu_uuid, greatest(s.lo_s, epoch(lo::TIMESTAMP)) AS lo_s, least(s.hi_s, epoch(hi::TIMESTAMP)) AS hi_s
    FROM sampled s JOIN (SELECT DISTINCT dev, node, gpu_uuid FROM devs) g USING (dev)
    UNION ALL
    SELECT g.node, g.gpu_uuid, greatest(h.lo_s, epoch(lo::TIMESTAMP)), least(h.hi_s, epoch(hi::TIMESTAMP))
    FROM held h JOIN stg_gpus g USING (node)
),
ordered AS (
    SELECT *, max(hi_s) OVER (PARTITION BY node, gpu_uuid ORDER BY lo_s, hi_s
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM spans WHERE hi_s > lo_s
),
merged AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR lo_s > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY node, gpu_uuid ORDER BY lo_s, hi_s ROWS UNBOUNDED PRECEDING) AS part
    FROM ordered
)
SELECT node, gpu_uuid, min(lo_s) AS lo_s, max(hi_s) AS hi_s FROM merged GROUP BY node, gpu_uuid, part;

-- Pod (container) states from kube-state-metrics, one row per change (model.BUNDLE_COLUMNS["pod_status"]):
-- names trimmed, empty text NULL, and until_ts, when the pod's (container's) next row replaces it
-- (NULL: the last known state; how long it held is unknown past the last sample of anything).
CREATE OR REPLACE VIEW stg_pod_status_def AS
WITH raw AS (
    SELECT DISTINCT ON (ts, namespace, pod, container) * FROM pod_status
),
clean AS (
    SELECT ts, trim(namespace) AS namespace, trim(pod) AS pod, nullif(trim(container), '') AS container,
           nullif(trim(phase), '') AS phase, restarts,
           nullif(trim(last_terminated_reason), '') AS last_terminated_reason, last_exit_code,
           nullif(trim(waiting_reason), '') AS waiting_reason, nullif(trim(job), '') AS job, gpu_request,
           created_ts, scheduled_ts, unschedulable, nullif(trim(gpu_resource), '') AS gpu_resource,
           nullif(trim(node_selector), '') AS node_selector
    FROM raw
)
SELECT *, lead(ts) OVER (PARTITION BY namespace, pod, container ORDER BY ts) AS until_ts FROM clean;
CREATE OR REPLACE TABLE stg_pod_status AS SELECT * FROM stg_pod_status_def LIMIT 0;

-- GPU health events (model.HEALTH_KINDS), one row per event.
CREATE OR REPLACE VIEW stg_health_def AS
SELECT DISTINCT ts, trim(node) AS node, trim(gpu_uuid) AS gpu_uuid, lower(trim(kind)) AS kind, code FROM health;
CREATE OR REPLACE TABLE stg_health AS SELECT * FROM stg_health_def LIMIT 0;

-- GPU-to-GPU links (model.BUNDLE_COLUMNS["topology"], gpuwatch/topology.py): both directions of every pair,
-- link upper-cased with its rank (ref_links, written from gpuwatch/topology.py: 0 NV .. 5 SYS); where the two directions disagree the better link is kept
-- (a placement penalty is never overestimated). Pairs absent here are unknown, never guessed.
CREATE OR REPLACE VIEW stg_topology_def AS
WITH raw AS (
    SELECT trim(node) AS node, trim(gpu_uuid) AS gpu_uuid, trim(peer_gpu_uuid) AS peer_gpu_uuid,
           upper(trim(link)) AS link, nvlinks
    FROM topology WHERE trim(gpu_uuid) <> trim(peer_gpu_uuid)
),
both_ways AS (
    SELECT node, gpu_uuid, peer_gpu_uuid, link, nvlinks FROM raw
    UNION ALL
    SELECT node, peer_gpu_uuid, gpu_uuid, link, nvlinks FROM raw
),
ranked AS (
    SELECT b.*, r.link_rank FROM both_ways b JOIN ref_links r USING (link)
)
SELECT DISTINCT ON (node, gpu_uuid, peer_gpu_uuid) node, gpu_uuid, peer_gpu_uuid, link, nvlinks, link_rank
FROM ranked
ORDER BY node, gpu_uuid, peer_gpu_uuid, link_rank, nvlinks DESC NULLS LAST;
CREATE OR REPLACE TABLE stg_topology AS SELECT * FROM stg_topology_def LIMIT 0;

-- GPU compute processes (model.BUNDLE_COLUMNS["processes"]): names trimmed, empty pod_uid NULL, one row per
-- (ts, device, pid).
CREATE OR REPLACE VIEW stg_processes_def AS
SELECT DISTINCT ON (ts, node, gpu_uuid, mig_gi_id, pid)
       ts, trim(node) AS node, trim(gpu_uuid) AS gpu_uuid, mig_gi_id, pid, nullif(trim(pod_uid), '') AS pod_uid,
       in_pod, fb_used_bytes
FROM processes
ORDER BY ts, node, gpu_uuid, mig_gi_id, pid, fb_used_bytes DESC NULLS LAST;
CREATE OR REPLACE TABLE stg_processes AS SELECT * FROM stg_processes_def LIMIT 0;

-- The batch schedulers' pending gauges (model.BUNDLE_COLUMNS["scheduler_pending"]): names trimmed, empty
-- text NULL, a non-finite count NULL (unknown), one row per (ts, series).
CREATE OR REPLACE VIEW stg_scheduler_pending_def AS
SELECT DISTINCT ON (ts, scheduler, queue, job, status, unit)
       ts, lower(trim(scheduler)) AS scheduler, nullif(trim(queue), '') AS queue, nullif(trim(job), '') AS job,
       nullif(trim(status), '') AS status, lower(trim(unit)) AS unit,
       CASE WHEN isfinite(pending) THEN pending END AS pending
FROM scheduler_pending
ORDER BY ts, scheduler, queue, job, status, unit;
CREATE OR REPLACE TABLE stg_scheduler_pending AS SELECT * FROM stg_scheduler_pending_def LIMIT 0;
