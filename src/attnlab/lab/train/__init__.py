"""Training a tiny GPT with attnlab's attention: the run, one step's cost, checkpoints, the corpus, sampling,
and what a run showed."""
