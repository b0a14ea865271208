"""The Lightning side of vitbert: the training system, metrics, optimisers and callbacks."""
