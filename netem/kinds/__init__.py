"""One module per fault kind; netem.faults.REGISTRY lists them (the one place a kind is registered)."""
