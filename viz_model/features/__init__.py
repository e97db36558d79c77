"""Sparse dictionaries (SAEs and transcoders): SAELens-layout files, training, feature readouts (torch only)."""

from viz_model.features.dictionary import ARCHITECTURES, SparseDictionary, transcoder_out_hook
from viz_model.features.saelens import DictionaryError, load_dictionary, read_cfg, save_dictionary, shipped_dictionaries
from viz_model.features.index import FeatureIndex, load_index
from viz_model.features.readout import (activation_histogram, feature_acts, head_contributions, logit_effects, promoted_tokens,
                      reconstruction, top_features)
from viz_model.features.train import TrainResult, collect_activations, token_windows, train_dictionary, train_on_activations

__all__ = ["ARCHITECTURES", "DictionaryError", "FeatureIndex", "SparseDictionary", "TrainResult", "activation_histogram",
           "collect_activations", "feature_acts", "head_contributions", "load_dictionary", "load_index", "logit_effects",
           "promoted_tokens", "read_cfg", "reconstruction", "save_dictionary", "shipped_dictionaries", "token_windows",
           "top_features", "train_dictionary", "train_on_activations", "transcoder_out_hook"]
