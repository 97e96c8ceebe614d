"""The actors a daemon hosts: `table` (the per-actor state machine as one table,
`next_phase`, and the hosting table), `succession` (the hand-over: how a
checkpointed actor's slot and GPUs go to the actors after it), `starts` (the
Run and Restore calls in flight, which a checkpointed actor's cleanup lets go
first), `admission` (may a call start; the drain), `hosting` (a planned sandbox
put up and taken down), `stats` (one actor's stats from runsc), `sampling` (every
actor's latest, taken in the background for the discovery read)."""
