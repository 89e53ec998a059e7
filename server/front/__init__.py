"""The front: domain jobs in, domain results out. dispatch picks models and detects languages, registry names the
models, service.HeldModel (a model this process holds, with its engine) validates, tokenizes and submits one model's
jobs; generation is generation's door as dispatch is translation's, speech speech's; the services every API shares
(access.Keys, glossaries.Glossaries, document_jobs.DocumentJobs, downloads.Downloads) reach their stores through
server.stores. No HTTP and no Ray here."""

from .provider import ModelProvider, ServedModel
from .registry import DEMO_MODEL_NAME, ModelEntry, ModelRegistry, model_info, model_limits
from .service import HeldModel

__all__ = ["DEMO_MODEL_NAME", "HeldModel", "ModelEntry", "ModelProvider", "ModelRegistry", "ServedModel",
           "model_info", "model_limits"]
