"""The actors a daemon hosts: `table` (the per-actor state machine as one table,
`next_phase`, and the hosting table), `admission` (may a call start; the
drain), `hosting` (a planned sandbox put up and taken down), `stats`."""
