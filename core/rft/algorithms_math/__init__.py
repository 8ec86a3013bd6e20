"""Algorithm maths waiting to move into per-algorithm plugin packages (pure functions)."""
