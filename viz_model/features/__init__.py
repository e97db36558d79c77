"""Sparse dictionaries (SAEs and transcoders): SAELens-layout files, training, feature readouts (torch only)."""

from .dictionary import ARCHITECTURES, SparseDictionary, transcoder_out_hook
from .io import DictionaryError, load_dictionary, read_cfg, save_dictionary
from .train import TrainResult, collect_activations, token_windows, train_dictionary, train_on_activations

__all__ = ["ARCHITECTURES", "DictionaryError", "SparseDictionary", "TrainResult", "collect_activations", "load_dictionary",
           "read_cfg", "save_dictionary", "token_windows", "train_dictionary", "train_on_activations", "transcoder_out_hook"]
