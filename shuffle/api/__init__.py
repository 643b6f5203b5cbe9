"""Events that travel in-band with records (barriers, end of partition, ...)."""
