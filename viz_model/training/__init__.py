"""Training: the CLI (``python -m viz_model.training``), the language-model and pairs trainers, the learning-rate
schedule, the synthetic dates task, and training timelines (series of checkpoints saved during a run)."""
