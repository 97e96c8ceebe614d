"""One lifecycle call's vocabulary, before any side effect: `requests` (what the
node agent asks), `validation` (pure checks), `deadline`, `phases`, `refusals`,
`sandbox_exits` (the seams logs and metrics hang on), `progress` (what a long phase
is doing while it runs), `answer` (work that waits until the caller has its answer).
Imports nothing else of the daemon."""
