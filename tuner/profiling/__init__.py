"""Profiles of a person's own model and host, read from the files they already have.

``tuner profile model`` reads a checkpoint's ``config.json`` (:mod:`.model_config`);
``tuner profile host`` reads ``nvidia-smi`` on the GPU host (:mod:`.host`, with the
datasheet figures of known GPUs in :mod:`.gpus`). Both write the YAML profiles that
:mod:`tuner.profiles` loads, so the simulator, ``tuner init`` and search spaces take a
new model or host without code changes.
"""
