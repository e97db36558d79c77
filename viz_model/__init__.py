"""The instrumented transformer: model, hooks, checkpoints, tokenizer and sampling (torch only)."""

from viz_model.loading.checkpoint import DEFAULT_MODEL, load_checkpoint, save_checkpoint
from viz_model.config import Config, ConfigError
from viz_model.hooks import ActivationCache, HookPoint
from viz_model.interventions import ablation, attribution, patching
from viz_model.model import KVCache, VizTransformer
from viz_model.sampling import Step, generate, iter_generate, next_token_probs
from viz_model.loading.sources import load_model, load_upload
from viz_model.loading.weights import CheckpointError

__all__ = ["ActivationCache", "CheckpointError", "Config", "ConfigError", "DEFAULT_MODEL", "HookPoint", "KVCache", "Step",
           "VizTransformer", "ablation", "attribution", "generate", "iter_generate", "load_checkpoint", "load_model", "load_upload",
           "next_token_probs", "patching", "save_checkpoint"]
