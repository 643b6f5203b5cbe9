"""pytest plugin of the credit-flow harness (fixtures are added with the harness)."""
