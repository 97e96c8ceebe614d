"""Child processes, at the base of ateom: `reaper` (spawn, wait and reap every
child; ateom may be PID 1) and `runner` (a tool run with a time limit, the
one contract the doctor and the GPU gatherers take)."""
