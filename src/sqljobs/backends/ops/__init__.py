"""The queries both engines share, written once over an :class:`~..executor.Executor`,
one module per group of the Backend protocol's methods: each function takes the executor
first and runs the engine's named statements through it."""
