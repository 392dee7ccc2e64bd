"""``python -m benchmarks``: print the comparison table (see :mod:`benchmarks.runner`)."""

if __name__ == "__main__":  # asv imports every module in benchmarks/; only run when executed
    from benchmarks.runner import main

    raise SystemExit(main())
