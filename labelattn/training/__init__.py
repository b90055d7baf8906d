"""`labelattn train` and everything only training uses: the options (`arguments`), the settings and their checks
(`settings`), the model, tokenizer and loaders a run builds (`build`), the run once set up (`setup`), the loop
(`run`), the scores it reports (`scores`), checkpoints, run events, label queries from descriptions, the teachers'
targets of distillation, static embeddings, the named backbones and the model card. May import `labelattn.data`, the
root model files and `explainers`; nothing outside training imports it but the command line."""
