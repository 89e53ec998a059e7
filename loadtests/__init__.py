"""Load tests for the translation server: a locustfile, a headless runner with SLO gates, sweeps and charts.

Run `python -m loadtests.run --help`; the user classes are in loadtests/locustfile.py.
"""
