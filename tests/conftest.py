"""Settings for the whole suite."""

from hypothesis import HealthCheck, settings

# Property tests must not depend on how fast the machine is: Hypothesis's default 200 ms
# deadline per example and its too-slow health check fail on a loaded 2-core CI machine.
settings.register_profile("shufflesim", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shufflesim")
