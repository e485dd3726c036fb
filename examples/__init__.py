"""The model zoo: FlexFlow-style definition scripts (``python examples/mlp.py -b 64``)."""
