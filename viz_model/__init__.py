"""The instrumented transformer: model, hooks, checkpoints, tokenizer and sampling (torch only)."""

from .checkpoint import DEFAULT_MODEL, load_checkpoint, save_checkpoint
from .config import Config, ConfigError
from .hooks import ActivationCache, HookPoint
from .interventions import ablation, attribution, patching
from .model import KVCache, VizTransformer
from .sampling import Step, generate, iter_generate, next_token_probs
from .sources import load_model, load_upload
from .weights import CheckpointError

__all__ = ["ActivationCache", "CheckpointError", "Config", "ConfigError", "DEFAULT_MODEL", "HookPoint", "KVCache", "Step",
           "VizTransformer", "ablation", "attribution", "generate", "iter_generate", "load_checkpoint", "load_model", "load_upload",
           "next_token_probs", "patching", "save_checkpoint"]
