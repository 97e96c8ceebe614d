"""ateom: the in-worker sandbox launcher.

Runs actors' containers under gVisor's runsc and gives them the Pod's GPUs by
merging CDI (Container Device Interface) edits into each OCI bundle.
"""

__version__ = "0.1.0"
