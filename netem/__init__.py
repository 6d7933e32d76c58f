"""Faults in one network namespace: iptables chains, NFLOG, NFQUEUE, tc netem. Knows nothing of the
Live API, and imports nothing from lab. The kinds are listed in netem.faults (the registry)."""
