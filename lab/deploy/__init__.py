"""Beyond one machine: the lab's topology rendered as Kubernetes objects, one run per index.

`compose_file` reads compose.yaml's two nodes (images, capabilities, sysctls), `shards` splits a
batch's live budget across indexes, `kubernetes` renders the manifests (`python -m
lab.deploy.kubernetes`) with each container's command from its service object, `shard` is what each
pod runs (through lab/topology/pod.py), `fan_in` merges and reports the shards, `matrix` is the same
fan-out as a GitHub Actions matrix.
"""
