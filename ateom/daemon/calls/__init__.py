"""One lifecycle call's vocabulary, before any side effect: `requests` (what the
node agent asks), `validation` (pure checks), `deadline`, `phases`, `refusals`
(the seams logs and metrics hang on). Imports nothing else of the daemon."""
