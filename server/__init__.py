"""Serving layer: scheduler, engine loop, FastAPI app, Ray Serve deployment."""
