"""hoardDB as a cluster: buckets spread over nodes, coordinated by etcd (docs/user/cluster.md, docs/dev/cluster.md).

    coord.py       membership, the catalog, the map, ownership and epochs in etcd (the one
                   module that imports the etcd client)
    partitions.py  a key's partition, and the balanced assignment of partitions to nodes
    node.py        a server as a node: what runs here, forwarding, scatter-gather
    moves.py       add-node / remove-node, and moving partitions while serving
    local.py       `hoarddb cluster up/down/status`: a cluster on one machine, and its state
"""
