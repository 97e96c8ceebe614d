"""A real CUDA actor's turn on a lent GPU machine: scripts/gpu_real_turn.sh runs `turn`."""
