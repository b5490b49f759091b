"""Floor 3: experiments. Each returns a JSON-serialisable result dataclass and never draws."""
