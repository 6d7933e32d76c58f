"""Faults in one network namespace: iptables chains, NFLOG, tc netem. Knows nothing of the Live API."""
