"""Floor 4: presentation only -- figures, tables and pages drawn from result objects."""
