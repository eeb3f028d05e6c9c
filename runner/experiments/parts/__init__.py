"""How the experiments' parts are measured: the code that imports torch. An experiment's module
(runner/experiments/NAME.py) names these functions by path and imports them when a case first
runs, so that reading the experiments (runner.declarations) loads no torch."""
