"""Loading: from a file, folder or hub id to a :class:`viz_model.VizTransformer`, and every check on the way.

- :mod:`.sources`: ``load_model`` / ``load_upload`` (native safetensors, Hugging Face folders and zips, nanoGPT, hub ids);
- :mod:`.checkpoint`: the native format (save, read, the shipped default model);
- :mod:`.families`: one converter per Hugging Face ``model_type`` (``FAMILIES``: the one table);
- :mod:`.weights`: weights into a model (checks, fusing, dispatching with accelerate);
- :mod:`.dtypes`: dtype and device choice;
- :mod:`.timeline`: the training-timeline file (snapshots of one run) read and written.

What an untrusted config may ask for and the memory a model costs are in :mod:`viz_model.limits`, beside the core that
reads them. Nothing is imported here, so that importing one loader does not load the others.
"""
