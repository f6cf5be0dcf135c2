-- Samples per node, in node order: refresh() cuts this list into node ranges of bounded size.
SELECT node, count(*) AS samples
FROM samples
GROUP BY node
ORDER BY node;
