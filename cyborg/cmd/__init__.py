"""Console scripts: each module has a ``main()`` (see setup.cfg)."""
