"""Whether a sampled run's tokens are draws from the target's own distribution: the referee and its evidence."""
