"""Checkpoints: barrier handling at a task's inputs (Flink's `streaming/runtime/io/checkpointing`),
the task's side of a checkpoint, and the JobManager's CheckpointCoordinator."""
