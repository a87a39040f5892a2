"""The simulated serving host: performance model, serving simulation, emulator server."""
