"""A torch.compile backend that counts the graphs it is given and runs them as traced (eager)."""

CALLS = []


def backend(graph_module, example_inputs):
    CALLS.append(len(list(graph_module.graph.nodes)))
    return graph_module.forward
