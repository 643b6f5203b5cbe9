"""Task metrics as Flink defines them (spec section 7), sampling and run summaries."""
