"""The app's pages, in the order of the pipeline: the sidebar's navigation (:mod:`viz_ui.app.layout`) and class mode's
page switch (:mod:`viz_ui.classroom.follow`) read this one table."""

PAGES = [  # (file, label, icon): the order follows the pipeline
    ("app.py", "Start", ":material/home:"),
    ("pages/walkthrough.py", "Guided walkthrough", ":material/route:"),
    ("pages/tokens.py", "1 · Tokens", ":material/text_fields:"),
    ("pages/embeddings.py", "2 · Embeddings & positions", ":material/scatter_plot:"),
    ("pages/attention.py", "3 · Attention", ":material/visibility:"),
    ("pages/head_steps.py", "3a · One head, step by step", ":material/calculate:"),
    ("pages/head_view.py", "3b · Head view", ":material/share:"),
    ("pages/heads.py", "3c · Head summaries", ":material/grid_view:"),
    ("pages/block.py", "3d · Residual stream & feed-forward", ":material/stacks:"),
    ("pages/logit_lens.py", "3e · Logit lens", ":material/layers:"),
    ("pages/moe.py", "3f · Mixture of experts", ":material/hub:"),
    ("pages/features.py", "3g · Features (sparse dictionaries)", ":material/dictionary:"),
    ("pages/output.py", "4 · Output probabilities", ":material/bar_chart:"),
    ("pages/interventions.py", "4a · Cause and effect (ablation, patching, attribution)", ":material/science:"),
    ("pages/steering.py", "4b · Steering & feature ablation", ":material/tune:"),
    ("pages/encoder_decoder.py", "5 · Encoder-decoder & cross-attention", ":material/swap_horiz:"),
    ("pages/timeline.py", "6 · Watch it learn (training timeline)", ":material/timelapse:"),
    ("pages/inspector.py", "Model inspector & upload", ":material/memory:"),
    ("pages/train.py", "Train your own", ":material/model_training:"),
]
