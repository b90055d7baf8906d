"""The corpus commands (`labelattn predict`, `labelattn explain --data`, `labelattn summarize`): their shared options
(`options`), their shared run from the options to the output file (`command`), the job that streams rows to shards
(`jobs`, `shards`) and the output file (`files`), this process's place in an `accelerate launch`
(`process_state`) and the per-class summaries (`summarize`). May import `labelattn.data` and `explainers`."""
