"""Records and events to bytes and back, as on Flink's wire."""
