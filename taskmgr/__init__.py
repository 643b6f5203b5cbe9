"""Runtime: JobManager, TaskManagers, tasks, metrics, deployment."""
