"""Training a tiny GPT with attnlab's attention: the run, one step's cost and the run's estimate,
checkpoints, the corpus (and the repeated sequences mixed in), sampling, what a run showed, and the heads
it grew that do a job you can name."""
