"""The front: domain jobs in, domain results out. dispatch picks models and detects languages, registry names the
models, ModelService validates, tokenizes and submits one model's jobs to its engine; the services every API shares
(access.Keys, glossaries.Glossaries, document_jobs.DocumentJobs) reach their stores through server.stores. No HTTP
and no Ray here."""

from .provider import ModelProvider, ServedModel
from .registry import DEMO_MODEL_NAME, ModelEntry, ModelRegistry, model_info, model_limits
from .service import ModelService

__all__ = ["DEMO_MODEL_NAME", "ModelEntry", "ModelProvider", "ModelRegistry", "ModelService", "ServedModel",
           "model_info", "model_limits"]
