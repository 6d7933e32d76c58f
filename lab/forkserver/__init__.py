"""The fork server: one pre-imported Python that forks the lab's own processes into a run's namespaces.

    server.py     the process (`python -m lab fork-server SOCKET`, lab/__main__.py): pre-imports the lab's entry
                  point (the CLI, the agent, the clients, the twin, the proxy) and forks a child per
                  request, which enters its namespace (lab.topology.nsenter) and runs `python -m lab ...`
    client.py     the orchestrator's side: start it, ask it for a child, hold the child as a Popen
    protocol.py   the messages between the two (pure)

It belongs to the orchestration: it starts the orchestration's processes, and its server imports the
top of the house. Importing this package installs the invocation's shared server as the netns
topology's process starter (lab.topology.starter), so the topology, a room below, names none of it;
`lab run` (lab/run.py) imports it. LAB_FORKSERVER=0: every process exec'd with `ip netns exec`.
"""
from lab.forkserver.client import shared
from lab.topology import starter

starter.install(shared)
