"""Checking attention: the float64 oracle, the grid of cases, the judge and its one tolerance rule, the
diagnoses, other people's functions run in a child process, and checks inside real models."""
