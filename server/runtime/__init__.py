"""Processes: the models of this process (local), --no-ray workers, Ray Serve's main, its application (deployment)
and the forwarding of jobs between its replicas (forwarding), a model's engine in a process of its own
(engine_process, engine_child, queued), and what every such process needs (process). The only importer of Ray,
uvicorn and multiprocessing."""
