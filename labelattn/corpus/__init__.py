"""The corpus commands (`labelattn predict`, `labelattn explain --data`, `labelattn summarize`): their shared options
and loading (`command`), the job that streams rows to Parquet shards (`jobs`, `shards`), the process layout
(`processes`) and the per-class summaries (`summarize`). May import `labelattn.data` and `explainers`."""
