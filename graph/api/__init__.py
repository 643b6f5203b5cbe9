"""The DataStream API (PyFlink's names) and the simulator's workload descriptions."""
