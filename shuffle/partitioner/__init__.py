"""Channel selectors (stream partitioners) and key-group assignment."""
