from tests.fixtures.placement import placement  # noqa: F401
