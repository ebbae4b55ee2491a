"""What a run leaves behind. In: the items' reports and bench records. Out: latency tables
and baselines, the run history (SQLite) and the nightly HTML report."""
