"""The engine layer: per-sequence state, the scheduler (no torch), the engine (one step on the model) and the
engine loop that runs them in a thread. No HTTP and no Ray here."""
