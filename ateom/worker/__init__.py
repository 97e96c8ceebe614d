"""The worker Pod as Agent Substrate's controller lays it out, below the daemon.

Substrate's WorkerPool controller runs the worker image with its own arguments
(``--pod-uid=$(POD_UID)``, the ``--atunnel-*`` flags) and volumes (the node's base
dir shared with the node agent, a downward-API volume with the container's limits,
the Pod's certificates). These modules turn that shape into plain values the daemon
uses; nothing here runs runsc or serves anything.

Reading order: `layout` (where the node agent dials ateom and lays the actors out,
keyed by the Pod's uid), `capacity` (the worker's CPU and memory limits, from the
downward-API files), `atunnel` (the ingress, connect and egress settings, as given).
"""
