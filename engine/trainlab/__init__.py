"""The training lab: train a small GPT-2-shaped model on a task and watch every head as it learns.

In data-flow order:

    spec.py         TrainSpec (the knobs), TrainLimits, parameter_count, check_spec (before anything is allocated)
    tasks.py        the tasks: a vocabulary, seeded training batches, a held-out set and a fixed probe each
    model.py        the model: pre-LN, learned positions, optional MLP, written as a transformers gpt2 checkpoint
    measures.py     what a snapshot measures on the probe and the held-out set
    snapshot.py     Snapshot: one step's measures and probe weights; write() makes a loadable checkpoint directory
    loop.py         train(spec, on_snapshot, should_stop): the seeded, deterministic, cancellable loop
    experiments.py  the ready-made experiments as data, each with its claim as a check over the measures

Nothing here imports the server: it hands Snapshots to a callback and stops when asked.
"""
