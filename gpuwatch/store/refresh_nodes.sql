-- Samples per node, in node order (from the raw keys refresh.sql just counted): refresh() cuts this
-- list into node ranges of bounded size.
SELECT node, sum(samples) AS samples
FROM stg_stream_aliases
GROUP BY node
ORDER BY node;
