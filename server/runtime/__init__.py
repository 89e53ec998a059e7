"""Processes: the models of this process (local), --no-ray workers, Ray Serve's main and deployment, a model's
engine in a process of its own, and what every such process needs (process). The only importer of Ray, uvicorn
and multiprocessing."""
