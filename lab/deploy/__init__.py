"""Beyond one machine: the lab's Compose services rendered as Kubernetes objects, one run per index.

`compose_file` reads compose.yaml (the one topology definition), `shards` splits a batch's live
budget across indexes, `kubernetes` renders the manifests (`python -m lab.deploy.kubernetes`),
`pod` is the topology of a run already inside its pod, and `shard` is what each pod runs.
"""
