"""The Flink reference: a scenario's job run on real Flink 2.3 (`shufflesim flink-reference`).

`job_args` turns a scenario into the arguments of `FlinkReferenceJob.java` (or refuses what it
cannot reproduce, by name); `runner` installs Flink from PyPI, compiles the job, runs it in a
MiniCluster and reads its metrics over REST; `compare` sets them beside a shufflesim run's.
"""
